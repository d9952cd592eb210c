//! Logging in Gardener's JSON shape, so that Gardener's log tooling (and operators used to Go
//! extensions) read our logs like any other component's: one object per line with `level`,
//! `ts` (RFC 3339, UTC, milliseconds), `logger`, `msg`, then the fields with lowerCamelCase
//! keys.
//!
//! `logger` is the innermost span field named `logger` (the manager gives every controller a
//! span with `logger = "<name>-controller"`), else the outermost span's name, else the event's
//! target. Span fields are included in every event inside the span, so a reconcile span with
//! `namespace` and `name` tags all its events.

use std::fmt::{self, Write as _};
use std::io::{IsTerminal, Write};

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use super::error::RuntimeError;
use super::options::{LogFormat, LogLevel};

/// Keys the line itself uses; an event field with one of these names is renamed so it cannot
/// overwrite them.
const RESERVED: [&str; 4] = ["level", "ts", "logger", "msg"];

/// Installs the global subscriber: events at `level` and above, written to stderr in `format`.
/// Fails when a global subscriber is already installed.
pub fn init(level: LogLevel, format: LogFormat) -> Result<(), RuntimeError> {
    let filter = EnvFilter::try_new(filter_directives(level))
        .map_err(|e| RuntimeError::Logging(e.to_string()))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry
            .with(GardenerJsonLayer::new(std::io::stderr))
            .try_init(),
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init(),
    };
    result.map_err(|e| RuntimeError::Logging(e.to_string()))
}

/// The filter for `--log-level`. At debug, the HTTP and TLS stacks stay at info: their debug
/// output is per connection and per frame and would bury the controllers' messages.
fn filter_directives(level: LogLevel) -> String {
    match level {
        LogLevel::Debug => {
            "debug,hyper=info,hyper_util=info,h2=info,rustls=info,tower=info".to_string()
        }
        LogLevel::Info => "info".to_string(),
        LogLevel::Warn => "warn".to_string(),
        LogLevel::Error => "error".to_string(),
    }
}

/// A layer that writes every event as one line of JSON in Gardener's shape to `W`.
pub struct GardenerJsonLayer<W> {
    make_writer: W,
}

impl<W> GardenerJsonLayer<W>
where
    W: for<'w> MakeWriter<'w> + 'static,
{
    pub fn new(make_writer: W) -> Self {
        GardenerJsonLayer { make_writer }
    }
}

/// The fields a span was created or recorded with, kept in the span's extensions.
#[derive(Default)]
struct SpanFields {
    logger: Option<String>,
    fields: Fields,
}

/// Ordered key/value pairs; a key recorded again replaces the earlier value in place.
#[derive(Default)]
struct Fields(Vec<(String, Value)>);

impl Fields {
    fn set(&mut self, key: String, value: Value) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }
}

/// Records tracing fields as JSON values. `message` and `logger` are captured separately
/// because they become the line's `msg` and `logger`.
struct JsonVisitor<'a> {
    fields: &'a mut Fields,
    message: Option<&'a mut Option<String>>,
    logger: Option<&'a mut Option<String>>,
}

impl JsonVisitor<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => {
                if let Some(message) = self.message.as_deref_mut() {
                    *message = Some(value_text(value));
                    return;
                }
            }
            "logger" => {
                if let Some(logger) = self.logger.as_deref_mut() {
                    *logger = Some(value_text(value));
                    return;
                }
            }
            _ => {}
        }
        let mut key = lower_camel_case(field.name());
        if RESERVED.contains(&key.as_str()) {
            key.push_str("Field");
        }
        self.fields.set(key, value);
    }
}

fn value_text(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let json = serde_json::Number::from_f64(value)
            .map_or_else(|| Value::String(value.to_string()), Value::Number);
        self.put(field, json);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(error_chain(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

/// An error's message followed by those of its sources that it does not already contain, like
/// the wrapped error strings of Go (`outer: inner`).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            let _ = write!(text, ": {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// `object_name` → `objectName`; keys that are already lowerCamelCase stay as they are.
pub fn lower_camel_case(name: &str) -> String {
    let name = name.strip_prefix("r#").unwrap_or(name);
    let mut out = String::with_capacity(name.len());
    let mut upper_next = false;
    for c in name.chars() {
        if c == '_' || c == '.' || c == '-' {
            upper_next = !out.is_empty();
        } else if upper_next {
            out.extend(c.to_uppercase());
            upper_next = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

impl<S, W> Layer<S> for GardenerJsonLayer<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut recorded = SpanFields::default();
        attrs.record(&mut JsonVisitor {
            fields: &mut recorded.fields,
            message: None,
            logger: Some(&mut recorded.logger),
        });
        span.extensions_mut().insert(recorded);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(recorded) = extensions.get_mut::<SpanFields>() {
            values.record(&mut JsonVisitor {
                fields: &mut recorded.fields,
                message: None,
                logger: Some(&mut recorded.logger),
            });
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let metadata = event.metadata();
        let mut fields = Fields::default();
        let mut logger: Option<String> = None;
        let mut root_span_name: Option<&'static str> = None;
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                root_span_name.get_or_insert(span.name());
                let extensions = span.extensions();
                if let Some(recorded) = extensions.get::<SpanFields>() {
                    if let Some(l) = &recorded.logger {
                        logger = Some(l.clone());
                    }
                    for (key, value) in &recorded.fields.0 {
                        fields.set(key.clone(), value.clone());
                    }
                }
            }
        }
        let mut message = None;
        event.record(&mut JsonVisitor {
            fields: &mut fields,
            message: Some(&mut message),
            logger: None,
        });
        let logger = logger
            .or_else(|| root_span_name.map(str::to_string))
            .unwrap_or_else(|| metadata.target().to_string());

        let mut line = String::with_capacity(256);
        line.push('{');
        push_pair(
            &mut line,
            "level",
            &Value::String(level_name(metadata.level()).to_string()),
        );
        line.push(',');
        // Millisecond precision in UTC, as Gardener's zap configuration writes it.
        let ts = format!("{:.3}", jiff::Timestamp::now());
        push_pair(&mut line, "ts", &Value::String(ts));
        line.push(',');
        push_pair(&mut line, "logger", &Value::String(logger));
        line.push(',');
        push_pair(
            &mut line,
            "msg",
            &Value::String(message.unwrap_or_default()),
        );
        for (key, value) in &fields.0 {
            line.push(',');
            push_pair(&mut line, key, value);
        }
        line.push_str("}\n");
        // One write per line keeps lines whole when several threads log at once. A failing log
        // sink has nowhere to report to, so the error is dropped.
        let _ = self
            .make_writer
            .make_writer_for(metadata)
            .write_all(line.as_bytes());
    }
}

fn push_pair(line: &mut String, key: &str, value: &Value) {
    // Serialising a string or a serde_json::Value cannot fail.
    line.push_str(&serde_json::to_string(key).unwrap_or_default());
    line.push(':');
    line.push_str(&serde_json::to_string(value).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Collects everything written, for inspection after the events.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Capture {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
            String::from_utf8(bytes)
                .expect("log output is UTF-8")
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    fn capture(f: impl FnOnce()) -> Vec<String> {
        let out = Capture::default();
        let subscriber = tracing_subscriber::registry().with(GardenerJsonLayer::new(out.clone()));
        tracing::subscriber::with_default(subscriber, f);
        out.lines()
    }

    fn parse(line: &str) -> serde_json::Map<String, Value> {
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(map)) => map,
            other => panic!("not a JSON object: {line} ({other:?})"),
        }
    }

    #[derive(Debug)]
    struct Inner;
    impl fmt::Display for Inner {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("connection refused")
        }
    }
    impl std::error::Error for Inner {}

    #[derive(Debug)]
    struct Outer(Inner);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cannot patch Lease")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn writes_gardener_shape_with_span_fields_and_camel_case_keys() {
        let lines = capture(|| {
            let controller = tracing::info_span!(
                "controller",
                logger = "extension-controller",
                controller = "extension"
            );
            let _c = controller.enter();
            let reconcile = tracing::info_span!(
                "reconcile",
                namespace = "shoot--p--s",
                object_name = "containerd-shim"
            );
            let _r = reconcile.enter();
            let error = Outer(Inner);
            tracing::error!(
                operation = "reconcile",
                attempt = 3u64,
                retry = true,
                error = &error as &dyn std::error::Error,
                "Reconcile failed"
            );
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(line.starts_with(r#"{"level":"error","ts":""#), "{line}");
        let obj = parse(line);
        let positions: Vec<Option<usize>> = [
            "\"level\":",
            "\"ts\":",
            "\"logger\":",
            "\"msg\":",
            "\"controller\":",
        ]
        .iter()
        .map(|key| line.find(key))
        .collect();
        assert!(
            positions.iter().all(Option::is_some) && positions.is_sorted(),
            "key order in {line}"
        );
        assert_eq!(obj["logger"], "extension-controller");
        assert_eq!(obj["msg"], "Reconcile failed");
        assert_eq!(obj["controller"], "extension");
        assert_eq!(obj["namespace"], "shoot--p--s");
        assert_eq!(obj["objectName"], "containerd-shim");
        assert_eq!(obj["operation"], "reconcile");
        assert_eq!(obj["attempt"], 3);
        assert_eq!(obj["retry"], true);
        assert_eq!(obj["error"], "cannot patch Lease: connection refused");
        assert!(
            !obj.contains_key("object_name") && !obj.contains_key("message"),
            "{line}"
        );
    }

    #[test]
    fn ts_is_rfc3339_utc_with_fraction() {
        let lines = capture(|| tracing::info!("Started"));
        let obj = parse(&lines[0]);
        let ts = obj["ts"].as_str().expect("ts is a string");
        assert!(ts.ends_with('Z') && ts.contains('.'), "{ts}");
        let (_, fraction) = ts.trim_end_matches('Z').rsplit_once('.').expect("fraction");
        assert_eq!(fraction.len(), 3, "{ts}");
        let parsed: jiff::Timestamp = ts.parse().expect("RFC 3339");
        let age = jiff::Timestamp::now().duration_since(parsed);
        assert!(age.as_secs() < 60, "{ts} is not now");
        assert_eq!(obj["level"], "info");
    }

    #[test]
    fn logger_falls_back_to_root_span_then_target() {
        let lines = capture(|| {
            tracing::warn!(target: "leader-election", "No span");
            let outer = tracing::info_span!("heartbeat");
            let _o = outer.enter();
            let inner = tracing::debug_span!("renew");
            let _i = inner.enter();
            tracing::warn!("In spans");
        });
        assert_eq!(parse(&lines[0])["logger"], "leader-election");
        assert_eq!(parse(&lines[0])["level"], "warn");
        assert_eq!(parse(&lines[1])["logger"], "heartbeat");
    }

    #[test]
    fn later_values_win_and_reserved_keys_are_kept() {
        let lines = capture(|| {
            let span =
                tracing::info_span!("controller", name = "outer", count = tracing::field::Empty);
            let _s = span.enter();
            span.record("count", 7u64);
            tracing::debug!(name = "inner", msg = "field", level = 1u64, "Message");
        });
        let obj = parse(&lines[0]);
        assert_eq!(obj["name"], "inner");
        assert_eq!(obj["count"], 7);
        assert_eq!(obj["msg"], "Message");
        assert_eq!(obj["msgField"], "field");
        assert_eq!(obj["level"], "debug");
        assert_eq!(obj["levelField"], 1);
    }

    #[test]
    fn camel_case_conversion() {
        assert_eq!(lower_camel_case("object_name"), "objectName");
        assert_eq!(lower_camel_case("objectName"), "objectName");
        assert_eq!(lower_camel_case("r#type"), "type");
        assert_eq!(lower_camel_case("http.status_code"), "httpStatusCode");
        assert_eq!(lower_camel_case("_leading"), "leading");
    }

    #[test]
    fn debug_filter_keeps_transport_noise_out() {
        assert!(EnvFilter::try_new(filter_directives(LogLevel::Debug)).is_ok());
        assert!(filter_directives(LogLevel::Debug).contains("hyper=info"));
        assert_eq!(filter_directives(LogLevel::Error), "error");
    }
}
