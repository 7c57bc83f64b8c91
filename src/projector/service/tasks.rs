//! The reader task, and what the loop waits on its tasks and timers with.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::{Interval, MissedTickBehavior};

use super::{READ_RETRY_MAX, READ_RETRY_MIN};
use crate::log::{LogError, LogReader, ReadBatch};

/// Reads the log into `batches` until the receiver goes or the log fails for good.
/// An unavailable log is reported and tried again (backing off); an empty batch is
/// sent only to say "caught up" once.
pub(super) async fn read_log<R: LogReader>(
    mut reader: R,
    batches: mpsc::Sender<Result<ReadBatch, LogError>>,
    read_batch_max: usize,
    read_wait: Duration,
) {
    let mut said_caught_up = false;
    let mut backoff = READ_RETRY_MIN;
    loop {
        match reader.next_batch(read_batch_max, read_wait).await {
            Ok(batch) => {
                backoff = READ_RETRY_MIN;
                if batch.entries.is_empty() && (said_caught_up || !batch.caught_up) {
                    continue;
                }
                said_caught_up = batch.caught_up;
                if batches.send(Ok(batch)).await.is_err() {
                    return;
                }
            }
            Err(err) => {
                let fatal = !matches!(err, LogError::Unavailable { .. });
                if batches.send(Err(err)).await.is_err() || fatal {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(READ_RETRY_MAX);
            }
        }
    }
}

/// Waits for the task in `slot` to end and empties the slot. Cancel-safe (a
/// `JoinHandle` can be polled again); only polled while the slot holds a task.
pub(super) async fn task_done<T>(slot: &mut Option<JoinHandle<T>>) -> Result<T, JoinError> {
    let task = slot
        .as_mut()
        .expect("polled only while a task is under way");
    let result = task.await;
    *slot = None;
    result
}

pub(super) fn interval(period: Duration) -> Interval {
    let mut timer = tokio::time::interval(period);
    timer.set_missed_tick_behavior(MissedTickBehavior::Skip);
    timer
}

pub(super) async fn next_tick(timer: &mut Option<Interval>) {
    match timer {
        Some(timer) => {
            timer.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Completes at `deadline`, or never without one.
pub(super) async fn sleep_until_some(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// Aborts the task when dropped, so a projector that is dropped or aborted leaves no reader behind.
pub(super) struct AbortOnDrop<T>(pub(super) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
