;; hello: a WASI preview 1 command that prints one fixed line to stdout and exits 0 (a pod
;; running it completes). The line is what the tests look for in the container's output:
;;
;;   hello from wasm on containerd-shim
;;
;; Assembled by wat2wasm (hack/images/payloads/wasm/wat2wasm; hack/nodes/wasm-images.sh).
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param $fd i32) (param $iovs i32) (param $iovs_len i32) (param $nwritten i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param $code i32)))

  (memory (export "memory") 1)

  ;; 0..8: the one iovec (pointer, length) handed to fd_write; 8..12: bytes written.
  ;; Strings end in NUL, so no length is counted by hand.
  (data (i32.const 64) "hello from wasm on containerd-shim\n\00")

  ;; The length of the NUL-terminated string at $ptr.
  (func $strlen (param $ptr i32) (result i32)
    (local $end i32)
    (local.set $end (local.get $ptr))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (local.get $end))))
        (local.set $end (i32.add (local.get $end) (i32.const 1)))
        (br $next)))
    (i32.sub (local.get $end) (local.get $ptr)))

  ;; Writes all of the NUL-terminated string at $ptr to $fd, however fd_write splits it.
  ;; Returns 0 or the WASI errno of the failed write.
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

  (func (export "_start")
    ;; A failed write is a failed run: exit 1 rather than pretend.
    (if (call $write_str (i32.const 1) (i32.const 64))
      (then (call $proc_exit (i32.const 1))))))
