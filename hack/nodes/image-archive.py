#!/usr/bin/env python3
"""Writes a single-layer container image as a docker-archive tar, the format
`ctr images import` reads: no registry and no container engine needed.

    image-archive.py --tag local.test/name:tag --out image.tar \
        [--entrypoint '["/bin/sh"]'] [--cmd '["-c","..."]'] [--env K=V]... \
        [--file SRC=/path/in/image[:MODE]]... [--symlink /path/in/image=TARGET]... \
        [--dir /path/in/image]... [--arch amd64]

The archive is reproducible: entries are sorted, owned by root and dated at the epoch, so the
same inputs give the same bytes (and the same image ID). Without a tag, the image is tagged
`id-<first 12 hex digits of its ID>`. Prints the image reference.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def tar_info(name, kind, mode, size=0, linkname=""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = linkname
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def build_layer(files, symlinks, dirs):
    """The layer tar: every parent directory, then files and symlinks, sorted by path."""
    entries = {}

    def add_parents(path):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            entries.setdefault(d, ("dir", 0o755, None))

    for d in dirs:
        add_parents(d.rstrip("/") + "/x")
    for src, dst, mode in files:
        add_parents(dst)
        entries[dst.strip("/")] = ("file", mode, src)
    for dst, target in symlinks:
        add_parents(dst)
        entries[dst.strip("/")] = ("link", 0o777, target)

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            kind, mode, data = entries[name]
            if kind == "dir":
                tar.addfile(tar_info(name, tarfile.DIRTYPE, mode))
            elif kind == "link":
                tar.addfile(tar_info(name, tarfile.SYMTYPE, mode, linkname=data))
            else:
                with open(data, "rb") as f:
                    content = f.read()
                tar.addfile(tar_info(name, tarfile.REGTYPE, mode, len(content)), io.BytesIO(content))
    return out.getvalue()


def parse_file(spec):
    src, sep, rest = spec.partition("=")
    if not sep or not rest.startswith("/"):
        raise SystemExit(f"--file {spec!r}: expected SRC=/path/in/image[:MODE]")
    dst, _, mode = rest.partition(":")
    if not os.path.isfile(src):
        raise SystemExit(f"--file {spec!r}: {src} is not a file")
    default = 0o755 if os.access(src, os.X_OK) else 0o644
    return src, dst, int(mode, 8) if mode else default


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tag", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--entrypoint", type=json.loads)
    p.add_argument("--cmd", type=json.loads)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--symlink", action="append", default=[])
    p.add_argument("--dir", action="append", default=[])
    p.add_argument("--arch", default="amd64")
    args = p.parse_args()

    files = [parse_file(f) for f in args.file]
    symlinks = []
    for s in args.symlink:
        dst, sep, target = s.partition("=")
        if not sep or not dst.startswith("/"):
            raise SystemExit(f"--symlink {s!r}: expected /path/in/image=TARGET")
        symlinks.append((dst, target))
    layer = build_layer(files, symlinks, args.dir)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()

    container_config = {"Env": args.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
    if args.entrypoint is not None:
        container_config["Entrypoint"] = args.entrypoint
    if args.cmd is not None:
        container_config["Cmd"] = args.cmd
    config = {
        "architecture": args.arch,
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": container_config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "hack/nodes/image-archive.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    reference = args.tag
    if ":" not in reference.rsplit("/", 1)[-1]:
        # No tag given: tag by content, so a changed image is a new reference (and a new pod
        # template) while an unchanged one keeps its name.
        reference += ":id-" + image_id[:12]
    manifest = [{"Config": image_id + ".json", "RepoTags": [reference], "Layers": [layer_name]}]
    manifest_bytes = json.dumps(manifest, separators=(",", ":")).encode()

    tmp = args.out + ".partial"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [
            (image_id + ".json", config_bytes),
            (diff_id.split(":")[1], None),
            (layer_name, layer),
            ("manifest.json", manifest_bytes),
        ]:
            if data is None:
                tar.addfile(tar_info(name, tarfile.DIRTYPE, 0o755))
            else:
                tar.addfile(tar_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    os.replace(tmp, args.out)
    print(reference)


if __name__ == "__main__":
    sys.exit(main())
