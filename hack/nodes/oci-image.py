#!/usr/bin/env python3
"""Adds a single-layer container image for one platform to an OCI image layout directory,
the form `crane push` uploads to a registry as it is: no container engine needed.

    oci-image.py --out DIR --name REPOSITORY[:TAG] [--platform linux/amd64] [--index] \
        [--entrypoint '["/bin/sh"]'] [--cmd '["-c","..."]'] [--env K=V]... [--user UID:GID] \
        [--file SRC=/path/in/image[:MODE]]... [--symlink /path/in/image=TARGET]... \
        [--dir /path/in/image]...

DIR's index.json names exactly one thing, the image to push: the image manifest while DIR holds
one platform (and --index is not given), otherwise an image index with one manifest per
platform. Running the script again on the same DIR for another platform (--platform
linux/arm64 with that platform's files) adds it to the index; for a platform DIR already has,
the new image replaces the old one.

Everything is content-addressed and reproducible: layer entries are sorted, owned by root and
dated at the epoch, the layer is gzip-compressed without a name or a date, and every JSON
document is written with sorted keys; the same inputs give the same bytes, so the same digests.
Prints the digest (`sha256:<hex>`) of what index.json names. The repository and tag (without
a tag: `id-<first 12 hex digits of that digest>`) are recorded as the
`org.opencontainers.image.ref.name` annotation, for humans and for the pusher.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
EPOCH = "1970-01-01T00:00:00Z"


def canonical(document):
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


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
            entries.setdefault("/".join(parts[:i]), ("dir", 0o755, None))

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


def gzip_bytes(data):
    """gzip without a file name and with mtime 0: the bytes depend on the input only."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=out, mtime=0) as z:
        z.write(data)
    return out.getvalue()


class Layout:
    """An OCI image layout directory: oci-layout, index.json and blobs/sha256/."""

    def __init__(self, root):
        self.root = root
        os.makedirs(os.path.join(root, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(root, "oci-layout"), "w") as f:
            f.write('{"imageLayoutVersion":"1.0.0"}')

    def write_blob(self, media_type, data, **extra):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        path = os.path.join(self.root, "blobs", "sha256", digest.split(":", 1)[1])
        if not os.path.exists(path):
            tmp = path + ".partial"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        descriptor = {"mediaType": media_type, "digest": digest, "size": len(data)}
        descriptor.update(extra)
        return descriptor

    def read_blob(self, digest):
        with open(os.path.join(self.root, "blobs", "sha256", digest.split(":", 1)[1]), "rb") as f:
            return f.read()

    def platform_manifests(self):
        """The per-platform manifest descriptors index.json names today (directly or through
        an image index)."""
        path = os.path.join(self.root, "index.json")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            top = json.load(f)["manifests"]
        if len(top) != 1:
            raise SystemExit(f"{path}: expected exactly one entry, found {len(top)}")
        if top[0]["mediaType"] == MANIFEST:
            return [top[0]]
        return json.loads(self.read_blob(top[0]["digest"]))["manifests"]

    def write_index(self, descriptor):
        tmp = os.path.join(self.root, "index.json.partial")
        with open(tmp, "wb") as f:
            f.write(canonical({"schemaVersion": 2, "mediaType": INDEX, "manifests": [descriptor]}))
        os.replace(tmp, os.path.join(self.root, "index.json"))


def parse_file(spec):
    src, sep, rest = spec.partition("=")
    if not sep or not rest.startswith("/"):
        raise SystemExit(f"--file {spec!r}: expected SRC=/path/in/image[:MODE]")
    dst, _, mode = rest.partition(":")
    if not os.path.isfile(src):
        raise SystemExit(f"--file {spec!r}: {src} is not a file")
    default = 0o755 if os.access(src, os.X_OK) else 0o644
    return src, dst, int(mode, 8) if mode else default


def parse_platform(spec):
    parts = spec.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise SystemExit(f"--platform {spec!r}: expected OS/ARCHITECTURE[/VARIANT], e.g. linux/arm64")
    platform = {"os": parts[0], "architecture": parts[1]}
    if len(parts) == 3:
        platform["variant"] = parts[2]
    return platform


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the OCI image layout directory")
    p.add_argument("--name", required=True, help="REPOSITORY[:TAG], recorded as the ref.name annotation")
    p.add_argument("--platform", default="linux/amd64")
    p.add_argument("--index", action="store_true", help="name an image index even for a single platform")
    p.add_argument("--entrypoint", type=json.loads)
    p.add_argument("--cmd", type=json.loads)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--user", help="the user the container runs as, e.g. 65532:65532")
    p.add_argument("--file", action="append", default=[])
    p.add_argument("--symlink", action="append", default=[])
    p.add_argument("--dir", action="append", default=[])
    args = p.parse_args()

    platform = parse_platform(args.platform)
    files = [parse_file(f) for f in args.file]
    symlinks = []
    for s in args.symlink:
        dst, sep, target = s.partition("=")
        if not sep or not dst.startswith("/"):
            raise SystemExit(f"--symlink {s!r}: expected /path/in/image=TARGET")
        symlinks.append((dst, target))

    layout = Layout(args.out)
    layer = build_layer(files, symlinks, args.dir)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_descriptor = layout.write_blob(LAYER, gzip_bytes(layer))

    container_config = {"Env": args.env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
    if args.entrypoint is not None:
        container_config["Entrypoint"] = args.entrypoint
    if args.cmd is not None:
        container_config["Cmd"] = args.cmd
    if args.user is not None:
        container_config["User"] = args.user
    config = dict(platform)
    config.update({
        "created": EPOCH,
        "config": container_config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": EPOCH, "created_by": "hack/nodes/oci-image.py"}],
    })
    config_descriptor = layout.write_blob(CONFIG, canonical(config))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config_descriptor,
        "layers": [layer_descriptor],
    }
    manifest_descriptor = layout.write_blob(MANIFEST, canonical(manifest), platform=platform)

    def platform_key(descriptor):
        q = descriptor.get("platform", {})
        return (q.get("os", ""), q.get("architecture", ""), q.get("variant", ""))

    manifests = [m for m in layout.platform_manifests() if platform_key(m) != platform_key(manifest_descriptor)]
    manifests.append(manifest_descriptor)
    manifests.sort(key=platform_key)
    if len(manifests) == 1 and not args.index:
        top = dict(manifests[0])
    else:
        index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}
        top = layout.write_blob(INDEX, canonical(index))

    reference = args.name
    if ":" not in reference.rsplit("/", 1)[-1]:
        reference += ":id-" + top["digest"].split(":", 1)[1][:12]
    top["annotations"] = {REF_NAME: reference}
    top.pop("platform", None)
    layout.write_index(top)
    print(top["digest"])


if __name__ == "__main__":
    sys.exit(main())
