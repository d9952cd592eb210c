//! A recording actuator for reconciler tests: it records every call with the object it saw,
//! and can be told to succeed, fail with codes, block until released, report progress, or
//! sleep.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gardener_extension_containerd_shim::gardener::api::{ErrorCode, Extension};
use gardener_extension_containerd_shim::gardener::error_codes::CodedError;
use gardener_extension_containerd_shim::gardener::extension::{Actuator, ActuatorContext, Outcome};
use kube::ResourceExt;
use tokio::sync::Notify;

/// The five actuator operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Reconcile,
    Delete,
    ForceDelete,
    Migrate,
    Restore,
}

/// One recorded call: the operation and the Extension exactly as the actuator received it.
#[derive(Clone, Debug)]
pub struct Call {
    pub op: Op,
    pub extension: Extension,
    pub had_cluster: bool,
    /// When the actuator was called.
    pub at: std::time::Instant,
}

/// What the next calls do.
#[derive(Clone, Debug)]
pub enum Behaviour {
    Succeed,
    Fail {
        message: String,
        codes: Vec<ErrorCode>,
    },
    /// Wait until [`Recorder::release`] is called, then succeed.
    Block,
    Sleep(Duration),
    InProgress {
        description: String,
        requeue_after: Duration,
    },
}

impl Behaviour {
    /// Fail with `message` and no error codes.
    pub fn fail(message: &str) -> Behaviour {
        Behaviour::Fail {
            message: message.to_string(),
            codes: vec![],
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TestError {
    pub message: String,
    pub codes: Vec<ErrorCode>,
}

impl CodedError for TestError {
    fn codes(&self) -> Vec<ErrorCode> {
        self.codes.clone()
    }
}

/// Shared between the test and the actuator the controller owns.
#[derive(Clone)]
pub struct Recorder {
    calls: Arc<Mutex<Vec<Call>>>,
    behaviour: Arc<Mutex<Behaviour>>,
    release: Arc<Notify>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            calls: Arc::new(Mutex::new(Vec::new())),
            behaviour: Arc::new(Mutex::new(Behaviour::Succeed)),
            release: Arc::new(Notify::new()),
        }
    }
}

impl Recorder {
    pub fn set(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    /// Lets every blocked call finish (and the next one too, if none is waiting yet).
    pub fn release(&self) {
        self.release.notify_waiters();
        self.release.notify_one();
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn ops(&self) -> Vec<Op> {
        self.calls().into_iter().map(|c| c.op).collect()
    }

    /// The name of the Extension of each call, in call order.
    pub fn names(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| c.extension.name_any())
            .collect()
    }

    pub fn count(&self, op: Op) -> usize {
        self.calls().iter().filter(|c| c.op == op).count()
    }

    pub fn actuator(&self) -> RecordingActuator {
        RecordingActuator(self.clone())
    }
}

pub struct RecordingActuator(Recorder);

impl RecordingActuator {
    async fn act(&self, op: Op, ctx: &ActuatorContext<'_>) -> Result<Outcome, TestError> {
        self.0.calls.lock().unwrap().push(Call {
            op,
            extension: ctx.extension.clone(),
            had_cluster: ctx.cluster.is_some(),
            at: std::time::Instant::now(),
        });
        let behaviour = self.0.behaviour.lock().unwrap().clone();
        match behaviour {
            Behaviour::Succeed => Ok(Outcome::Done),
            Behaviour::Fail { message, codes } => Err(TestError { message, codes }),
            Behaviour::Block => {
                self.0.release.notified().await;
                Ok(Outcome::Done)
            }
            Behaviour::Sleep(d) => {
                tokio::time::sleep(d).await;
                Ok(Outcome::Done)
            }
            Behaviour::InProgress {
                description,
                requeue_after,
            } => Ok(Outcome::InProgress {
                description,
                requeue_after,
            }),
        }
    }
}

impl Actuator for RecordingActuator {
    type Error = TestError;

    async fn reconcile(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, TestError> {
        self.act(Op::Reconcile, ctx).await
    }
    async fn delete(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, TestError> {
        self.act(Op::Delete, ctx).await
    }
    async fn force_delete(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, TestError> {
        self.act(Op::ForceDelete, ctx).await
    }
    async fn migrate(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, TestError> {
        self.act(Op::Migrate, ctx).await
    }
    async fn restore(&self, ctx: &ActuatorContext<'_>) -> Result<Outcome, TestError> {
        self.act(Op::Restore, ctx).await
    }
}
