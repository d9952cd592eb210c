//! sha256 in lower-case hex, of bytes or of a file streamed from disk. Payload resolution, the
//! host's file layer, the state hashes and the status file all hash; keeping the primitive here
//! lets each of them depend on it instead of on one another.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The sha256 of a file's content, read in chunks: shim binaries are too large to hold in memory
/// only to hash them.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_files_hash_alike() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("binary");
        // Larger than one read buffer, so the chunked path is exercised.
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        assert_eq!(sha256_file(&path).unwrap(), sha256_hex(&content));
        assert!(sha256_file(&dir.path().join("missing")).is_err());
    }
}
