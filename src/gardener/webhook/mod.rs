//! Webhooks an extension serves to the seed's API server, as Gardener's extension library
//! runs them: its own CA and serving certificate kept in a Secret and renewed
//! ([`certs`]), the webhook configuration registered with that CA ([`registration`]), and
//! HTTPS that picks up a renewed certificate without a restart ([`tls`]).

pub mod certs;
pub mod registration;
pub mod server;
pub mod tls;
