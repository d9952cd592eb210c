//! Records every version of one object as the API server's watch delivers it, so tests can
//! assert on the order of writes (finalizer before status, status before finalizer removal).

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The versions seen so far; recording stops when this is dropped.
pub struct History<K> {
    versions: Arc<Mutex<Vec<K>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Drop for History<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K: Clone> History<K> {
    pub fn versions(&self) -> Vec<K> {
        self.versions.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Starts recording the object `name` (which may not exist yet) and returns once the watch is
/// established, so every later write is recorded.
pub async fn record<K>(api: Api<K>, name: &str) -> History<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let versions = Arc::new(Mutex::new(Vec::new()));
    let sink = versions.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Apply(obj) | Event::InitApply(obj) | Event::Delete(obj)) => {
                    if let Ok(mut v) = sink.lock() {
                        v.push(obj);
                    }
                }
                Ok(Event::InitDone) => {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                _ => {}
            }
        }
    });
    if tokio::time::timeout(super::poll::DEFAULT_TIMEOUT, ready_rx)
        .await
        .is_err()
    {
        panic!("the recording watch did not start");
    }
    History { versions, task }
}
