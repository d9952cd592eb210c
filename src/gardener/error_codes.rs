//! How errors carry Gardener error codes into `status.lastError.codes`.
//!
//! Every error enum of every layer implements [`CodedError`], so the codes written to the
//! Extension are right by construction instead of being guessed from message text.

use super::api::ErrorCode;

/// An error that knows which Gardener error codes describe it.
pub trait CodedError: std::error::Error {
    /// The codes for `lastError.codes`; empty when none applies (a plain retryable error).
    fn codes(&self) -> Vec<ErrorCode>;
}
