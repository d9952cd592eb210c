;; http: a WASI preview 1 command that serves HTTP, answering every request with the same
;; 200 response and body:
;;
;;   hello from wasm http on containerd-shim
;;
;; WASI preview 1 cannot create sockets; it can only accept connections on a listening socket
;; the host opened. The wasmtime shim (hack/images/payloads/wasm) opens one when the
;; container's environment has WASI_TCP_LISTEN=ADDRESS:PORT (the image sets 0.0.0.0:8080; a pod
;; may override it) and hands it over as descriptor 3, so the port is chosen by that variable,
;; not here.
;;
;; One connection at a time: read the request head (up to the blank line, 8 KiB at most), write
;; the response, close. Runs until the container is stopped. Assembled by
;; hack/images/payloads/wasm/wat2wasm (hack/nodes/wasm-images.sh).
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param $fd i32) (param $iovs i32) (param $iovs_len i32) (param $nwritten i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param $fd i32) (param $iovs i32) (param $iovs_len i32) (param $nread i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param $fd i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_fdstat_get"
    (func $fd_fdstat_get (param $fd i32) (param $stat i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_accept"
    (func $sock_accept (param $fd i32) (param $flags i32) (param $conn i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param $code i32)))

  (memory (export "memory") 1)

  ;; Memory layout:
  ;;   0..8      the one iovec (pointer, length) of fd_read/fd_write
  ;;   8..12     bytes read or written
  ;;   12..16    the accepted connection's descriptor
  ;;   16..40    fd_fdstat_get's result (the file type is its first byte)
  ;;   64..      NUL-terminated strings, so no length is counted by hand
  ;;   4096..    the request buffer ($buf_size bytes)
  (global $listener i32 (i32.const 3))
  (global $filetype_socket_stream i32 (i32.const 6))
  (global $buf i32 (i32.const 4096))
  (global $buf_size i32 (i32.const 8192))

  (data (i32.const 64) "http: serving on the pre-opened listener (descriptor 3)\n\00")
  (data (i32.const 256)
    "http: descriptor 3 is not a listening socket: the shim opens one when WASI_TCP_LISTEN is set (e.g. 0.0.0.0:8080)\n\00")
  (data (i32.const 512) "http: sock_accept failed\n\00")
  ;; Content-Length is the body's length in bytes, newline included.
  (data (i32.const 1024)
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 40\r\nConnection: close\r\n\r\n"
    "hello from wasm http on containerd-shim\n\00")

  (func $strlen (param $ptr i32) (result i32)
    (local $end i32)
    (local.set $end (local.get $ptr))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (local.get $end))))
        (local.set $end (i32.add (local.get $end) (i32.const 1)))
        (br $next)))
    (i32.sub (local.get $end) (local.get $ptr)))

  ;; Writes all of the NUL-terminated string at $ptr to $fd. Returns 0 or the WASI errno.
  (func $write_str (param $fd i32) (param $ptr i32) (result i32)
    (local $len i32)
    (local $errno i32)
    (local.set $len (call $strlen (local.get $ptr)))
    (block $done
      (loop $more
        (br_if $done (i32.eqz (local.get $len)))
        (i32.store (i32.const 0) (local.get $ptr))
        (i32.store (i32.const 4) (local.get $len))
        (local.set $errno (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8)))
        (if (local.get $errno) (then (return (local.get $errno))))
        (local.set $ptr (i32.add (local.get $ptr) (i32.load (i32.const 8))))
        (local.set $len (i32.sub (local.get $len) (i32.load (i32.const 8))))
        (br $more)))
    (i32.const 0))

  ;; Whether the first $len bytes of the request buffer hold the blank line ending the head.
  (func $has_head_end (param $len i32) (result i32)
    (local $i i32)
    (block $no
      (loop $next
        (br_if $no (i32.gt_u (i32.add (local.get $i) (i32.const 4)) (local.get $len)))
        ;; "\r\n\r\n" read as a little-endian i32
        (if (i32.eq (i32.load (i32.add (global.get $buf) (local.get $i))) (i32.const 0x0a0d0a0d))
          (then (return (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  ;; Answers one connection: reads the request head, then writes the response. A connection
  ;; that fails or closes before sending anything gets no answer (a TCP probe does that).
  (func $serve (param $conn i32)
    (local $len i32)
    (local $n i32)
    (block $read_done
      (loop $read_more
        (br_if $read_done (i32.ge_u (local.get $len) (global.get $buf_size)))
        (i32.store (i32.const 0) (i32.add (global.get $buf) (local.get $len)))
        (i32.store (i32.const 4) (i32.sub (global.get $buf_size) (local.get $len)))
        (if (call $fd_read (local.get $conn) (i32.const 0) (i32.const 1) (i32.const 8))
          (then (return)))
        (local.set $n (i32.load (i32.const 8)))
        (br_if $read_done (i32.eqz (local.get $n)))
        (local.set $len (i32.add (local.get $len) (local.get $n)))
        (br_if $read_done (call $has_head_end (local.get $len)))
        (br $read_more)))
    (if (i32.eqz (local.get $len)) (then (return)))
    ;; A client gone before the answer is its own loss; the server carries on.
    (drop (call $write_str (local.get $conn) (i32.const 1024))))

  (func (export "_start")
    (if (i32.or
          (call $fd_fdstat_get (global.get $listener) (i32.const 16))
          (i32.ne (i32.load8_u (i32.const 16)) (global.get $filetype_socket_stream)))
      (then
        (drop (call $write_str (i32.const 2) (i32.const 256)))
        (call $proc_exit (i32.const 2))))
    (drop (call $write_str (i32.const 1) (i32.const 64)))
    (loop $accept
      (if (call $sock_accept (global.get $listener) (i32.const 0) (i32.const 12))
        (then
          (drop (call $write_str (i32.const 2) (i32.const 512)))
          (call $proc_exit (i32.const 1))))
      (call $serve (i32.load (i32.const 12)))
      (drop (call $fd_close (i32.load (i32.const 12))))
      (br $accept))))
