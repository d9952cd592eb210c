//! `containerd-shim-wasmtime-v1`: a containerd shim (runtime type `io.containerd.wasmtime.v1`)
//! that runs WASI preview 1 modules on Wasmtime, built on runwasi's `containerd-shim-wasm`.
//!
//! The binary of the catalog's `wasmtime` payload. The library does the containerd side (task
//! API, the container's namespaces and cgroups through youki's libcontainer); this file only
//! runs the module inside that container.

use std::net::{SocketAddr, TcpListener};

use anyhow::{Context, Result, bail};
use containerd_shim_wasm::sandbox::Sandbox;
use containerd_shim_wasm::sandbox::context::{RuntimeContext, WasmBinaryType};
use containerd_shim_wasm::shim::{Cli, Shim, Version};
use wasi_common::sync::{Dir, WasiCtxBuilder, ambient_authority};
use wasi_common::{I32Exit, WasiCtx};
use wasmtime::{Engine, Linker, Module, Store};

/// The environment variable that asks the shim for a listening TCP socket, e.g.
/// `WASI_TCP_LISTEN=0.0.0.0:8080`. WASI preview 1 has no `bind`/`listen`, only `sock_accept` on
/// a socket the host opened, so a server module needs the host to open it: the shim binds the
/// address inside the container's network namespace (the pod's) and hands the listener to the
/// module as file descriptor 3 ([`LISTENER_FD`]), the way socket activation passes sockets.
const LISTEN_ENV: &str = "WASI_TCP_LISTEN";

/// Where the module finds the pre-opened listener: the first descriptor after stdio, so a module
/// needs no discovery. The root directory pre-open follows it.
const LISTENER_FD: u32 = 3;

struct WasmtimeShim;

impl Shim for WasmtimeShim {
    type Sandbox = WasmtimeSandbox;

    /// The name in containerd's view (`io.containerd.wasmtime.v1`) and in the shim's state
    /// directory; the binary name `containerd-shim-wasmtime-v1` follows from it.
    fn name() -> &'static str {
        "wasmtime"
    }

    /// `containerd-shim-wasmtime-v1 -v` prints these. The revision is the hash of the package's
    /// sources and lock file that hack/nodes/wasm-images.sh builds and caches it by (the
    /// library's default would run git at build time and name a commit of whatever checkout
    /// built it).
    fn version() -> Version {
        Version {
            version: env!("CARGO_PKG_VERSION"),
            revision: option_env!("WASM_SHIM_SOURCE_HASH").unwrap_or("<none>"),
        }
    }
}

#[derive(Default)]
struct WasmtimeSandbox;

impl Sandbox for WasmtimeSandbox {
    /// Runs in the container's init process (its namespaces, its root file system), after the
    /// library has decided the entrypoint is WebAssembly. Returns the module's exit code.
    async fn run_wasi(&self, ctx: &impl RuntimeContext) -> Result<i32> {
        // The library turns an error into exit code 137 and a line in the shim's log, which a
        // pod's user never sees: say what went wrong on the container's stderr as well.
        run(ctx).inspect_err(|err| eprintln!("containerd-shim-wasmtime-v1: {err:#}"))
    }
}

fn run(ctx: &impl RuntimeContext) -> Result<i32> {
    set_signal_dispositions()?;
    let entrypoint = ctx.entrypoint();
    let bytes = entrypoint
        .source
        .as_bytes()
        .context("reading the WebAssembly module")?;
    if let Some(WasmBinaryType::Component) = WasmBinaryType::from_bytes(&bytes) {
        // Checked before compiling so the error names the limitation, not a parse error.
        bail!("WebAssembly components are not supported by this shim, only WASI preview 1 modules");
    }

    // Compiled on first use in each container, never cached: a cache would be state on the
    // node that outlives the pod, which the installer's removal of the shim would not know of.
    let engine = Engine::default();
    let module = Module::from_binary(&engine, &bytes)
        .map_err(|err| wasmtime_error(err, "compiling the module"))?;

    let mut linker: Linker<WasiCtx> = Linker::new(&engine);
    wasi_common::sync::add_to_linker(&mut linker, |wasi| wasi)?;

    let mut store = Store::new(&engine, wasi_context(ctx)?);
    let instance = linker
        .instantiate(&mut store, &module)
        .map_err(|err| wasmtime_error(err, "instantiating the module"))?;
    let start = instance
        .get_typed_func::<(), ()>(&mut store, &entrypoint.func)
        .map_err(|err| wasmtime_error(err, format!("the entry function {:?}", entrypoint.func)))?;

    match start.call(&mut store, ()) {
        Ok(()) => Ok(0),
        // proc_exit ends the module with a trap that carries its exit code.
        Err(err) => match err.downcast_ref::<I32Exit>() {
            Some(exit) => Ok(exit.0),
            None => Err(wasmtime_error(err, "running the module")),
        },
    }
}

/// The WASI context of the container: its arguments (the first is the module's path), its
/// environment, its stdio (already the container's), the container's root directory pre-opened
/// as `/`, and, when [`LISTEN_ENV`] asks for one, the listening socket.
fn wasi_context(ctx: &impl RuntimeContext) -> Result<WasiCtx> {
    let mut builder = WasiCtxBuilder::new();
    builder.inherit_stdio().args(ctx.args())?;
    let mut listen = None;
    for entry in ctx.envs() {
        // An OCI spec's environment is `NAME=VALUE`; an entry without `=` has no value to pass.
        let Some((name, value)) = entry.split_once('=') else {
            continue;
        };
        builder.env(name, value)?;
        if name == LISTEN_ENV {
            listen = Some(value.to_string());
        }
    }
    // The listener goes in first so that it gets descriptor 3 and the directory the next one.
    if let Some(value) = listen {
        // An IP address, never a host name: the binary is static, and glibc's resolver would
        // load NSS modules of the node's glibc at run time.
        let address: SocketAddr = value.parse().map_err(|_| {
            anyhow::anyhow!(
                "{LISTEN_ENV}={value:?}: not an IP address and port such as 0.0.0.0:8080 (host names are not resolved)"
            )
        })?;
        let listener = TcpListener::bind(address)
            .with_context(|| format!("{LISTEN_ENV}={value}: binding the listening socket"))?;
        log::info!("pre-opened a TCP listener on {address} as descriptor {LISTENER_FD}");
        builder.preopened_socket(
            LISTENER_FD,
            wasi_common::sync::TcpListener::from_std(listener),
        )?;
    }
    let root =
        Dir::open_ambient_dir("/", ambient_authority()).context("opening the root directory")?;
    builder.preopened_dir(root, "/")?;
    Ok(builder.build())
}

/// The module runs as the init process of the container's PID namespace, which the kernel
/// spares from signals it has no handler for: SIGTERM would then do nothing and every stop would
/// wait for the kill after the grace period. A handler ends the process at once with the
/// conventional status 128 + signal, as a process without a handler would. SIGPIPE is ignored,
/// so a write to a connection the peer closed fails with EPIPE for the module to handle instead
/// of killing the server.
fn set_signal_dispositions() -> Result<()> {
    extern "C" fn exit_on_signal(signal: libc::c_int) {
        // SAFETY: _exit is async-signal-safe; nothing else runs here.
        unsafe { libc::_exit(128 + signal) }
    }
    let exit = exit_on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    let dispositions = [
        (libc::SIGTERM, exit),
        (libc::SIGINT, exit),
        (libc::SIGPIPE, libc::SIG_IGN),
    ];
    for (signal, handler) in dispositions {
        // SAFETY: the handler only calls an async-signal-safe function; the action struct is
        // fully initialised (zeroed, then the handler and an empty mask).
        let failed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut()) != 0
        };
        if failed {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("setting the disposition of signal {signal}"));
        }
    }
    Ok(())
}

/// Wasmtime has an error type of its own; this shim speaks anyhow like the shim library.
fn wasmtime_error(
    err: wasmtime::Error,
    context: impl std::fmt::Display + Send + Sync + 'static,
) -> anyhow::Error {
    anyhow::Error::from(err).context(context)
}

fn main() {
    WasmtimeShim::run(None);
}
