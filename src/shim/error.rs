//! Why an operation of the containerd-shim actuator failed, and the Gardener error codes that
//! tell gardenlet and the shoot owner whose problem it is.

use crate::gardener::api::ErrorCode;
use crate::gardener::error_codes::CodedError;
use crate::gardener::imagevector::ImageVectorError;
use crate::gardener::managed_resource;
use crate::gardener::shoot_client::ShootClientError;
use crate::shim::config::{ConfigError, desired};
use crate::shim::shoot_cleanup::CleanupError;

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The shoot owner's providerConfig is invalid; fixing it is up to them.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the Cluster of namespace {namespace} embeds no Shoot")]
    NoShoot { namespace: String },
    /// The operator's image vector or catalog does not serve what the configuration needs.
    #[error(transparent)]
    Images(#[from] desired::DesiredError),
    #[error("the image vector has no usable installer image: {0}")]
    InstallerImage(#[source] ImageVectorError),
    #[error(transparent)]
    ManagedResource(#[from] managed_resource::Error),
    #[error("cannot read ManagedResource {namespace}/{name}: {source}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The installer DaemonSets in the shoot cannot be read.
    #[error("cannot read the installer DaemonSets in the shoot of namespace {namespace}: {source}")]
    ShootRead {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    /// The shoot cannot be looked into for objects left behind.
    #[error(transparent)]
    ShootAccess(#[from] ShootClientError),
    /// The installers' Leases or old desired sets cannot be removed from the shoot.
    #[error(transparent)]
    Cleanup(Box<CleanupError>),
}

impl From<CleanupError> for ShimError {
    fn from(error: CleanupError) -> Self {
        ShimError::Cleanup(Box::new(error))
    }
}

impl CodedError for ShimError {
    fn codes(&self) -> Vec<ErrorCode> {
        match self {
            ShimError::Config(e) => e.codes(),
            ShimError::ManagedResource(e) => e.codes(),
            _ => Vec::new(),
        }
    }
}
