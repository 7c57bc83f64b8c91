//! One order budget for a whole run.
//!
//! Every stage of `schedule` has its own cap (`*_PER_RUN_MAX`), so no one stage
//! can starve the others, and all of them draw from one [`Orders`]: at most
//! [`ORDERS_PER_BATCH_MAX`] orders whose encoded size, bounded from above by
//! [`Order::encoded_len_max`], stays within [`ORDER_BATCH_BYTES_MAX`]. So a batch
//! always fits the broker's payload limit whatever the length of the ids in it,
//! and the fold never sees a batch it must refuse as too large: a refused batch
//! would be decided again, identically, for ever.
//!
//! What does not fit waits for the next run: a stage stops at the first order
//! the budget refuses.

use std::collections::BTreeSet;

use crate::core::event::{Order, ORDERS_PER_BATCH_MAX};
use crate::core::ids::{Attempt, TaskRef};

/// Most bytes the orders of one batch may take, encoded. The broker's default
/// payload limit is 1 MiB; the rest is left for the envelope (ids, algorithm,
/// signature) and headers.
pub const ORDER_BATCH_BYTES_MAX: usize = 896 * 1024;

/// The orders of one run, within the budget.
#[derive(Debug, Default)]
pub struct Orders {
    orders: Vec<Order>,
    /// The sum of `encoded_len_max` over `orders`.
    bytes: usize,
    /// The attempts a `Requeue`, `Cancel` or `Preempt` among `orders` ends: a later stage
    /// must not end one again, or the fold refuses the second order.
    ended: BTreeSet<(TaskRef, Attempt)>,
}

impl Orders {
    pub fn new() -> Self {
        Orders::default()
    }

    /// Adds the order if it fits the budget; says whether it did. A stage stops
    /// at the first refusal: the rest of its work waits for the next run.
    #[must_use = "a stage stops when the budget is spent"]
    pub fn push(&mut self, order: Order) -> bool {
        let bytes = order.encoded_len_max();
        if self.orders.len() == ORDERS_PER_BATCH_MAX || self.bytes + bytes > ORDER_BATCH_BYTES_MAX {
            return false;
        }
        self.bytes += bytes;
        if let Order::Requeue { task, attempt, .. } | Order::Cancel { task, attempt, .. } | Order::Preempt { task, attempt, .. } =
            &order
        {
            self.ended.insert((task.clone(), *attempt));
        }
        self.orders.push(order);
        true
    }

    /// Adds every order or none (the parts of one parallel task); says whether it did.
    #[must_use = "a stage stops when the budget is spent"]
    pub fn push_all(&mut self, orders: Vec<Order>) -> bool {
        let bytes: usize = orders.iter().map(Order::encoded_len_max).sum();
        if self.orders.len() + orders.len() > ORDERS_PER_BATCH_MAX || self.bytes + bytes > ORDER_BATCH_BYTES_MAX {
            return false;
        }
        orders.into_iter().all(|order| self.push(order))
    }

    /// Whether an order of this run already ends the attempt.
    pub fn ends(&self, task: &TaskRef, attempt: Attempt) -> bool {
        !self.ended.is_empty() && self.ended.contains(&(task.clone(), attempt))
    }

    /// Orders that still fit, counted in the largest orders there can be: a
    /// stage that books something before it pushes (a slot) asks first.
    pub fn has_room(&self) -> bool {
        self.orders.len() < ORDERS_PER_BATCH_MAX && self.bytes + Order::ENCODED_LEN_MAX <= ORDER_BATCH_BYTES_MAX
    }

    pub fn len(&self) -> usize {
        self.orders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.orders.is_empty()
    }

    /// The bound on the encoded size of the orders so far.
    pub fn bytes_max(&self) -> usize {
        self.bytes
    }

    pub fn as_slice(&self) -> &[Order] {
        &self.orders
    }

    pub fn into_vec(self) -> Vec<Order> {
        assert!(self.orders.len() <= ORDERS_PER_BATCH_MAX && self.bytes <= ORDER_BATCH_BYTES_MAX);
        self.orders
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::{EngineId, TaskRef};

    fn dispatch(n: usize) -> Order {
        let job = format!("{:j<64}", n);
        Order::Dispatch {
            task: TaskRef::new(crate::core::ids::JobId::new(&job[..64]).unwrap(), n as u32),
            attempt: 1,
            engine: EngineId::new(&format!("{:e<64}", n)[..64]).unwrap(),
            epoch: 1,
        }
    }

    #[test]
    fn the_budget_refuses_the_order_that_would_pass_its_bytes_and_takes_none_after() {
        let mut orders = Orders::new();
        let mut n = 0;
        while orders.push(dispatch(n)) {
            n += 1;
        }
        assert!(n < ORDERS_PER_BATCH_MAX, "64-character ids fill the bytes before the count: {n} orders");
        assert!(orders.bytes_max() <= ORDER_BATCH_BYTES_MAX);
        assert!(orders.bytes_max() + dispatch(n).encoded_len_max() > ORDER_BATCH_BYTES_MAX);
        assert!(!orders.has_room());
        assert_eq!(orders.len(), n);
    }
}
