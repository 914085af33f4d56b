//! [`DataParallel`]: the driver of a data-parallel program in one process. One thread per rank
//! owns that rank's state (its holders, model and data); a step is handed to every rank in
//! rank order without waiting for any rank to finish, and every rank is drained before any
//! rank's state is released.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::Communicator;
use crate::error::{Error, Result};

type Job<R> = Box<dyn FnOnce(&mut R) + Send>;

struct Worker<R> {
    jobs: Option<mpsc::Sender<Job<R>>>,
    thread: Option<JoinHandle<()>>,
}

/// One thread per rank, each owning its rank's state `R` (e.g. a step holder and the rank's
/// model), driven in lockstep.
///
/// [`DataParallel::run`] hands the same closure to every rank in rank order and only then
/// waits for their results: a rank's step may block (an NCCL call, a graph launch, reading a
/// loss back) until the other ranks made their matching calls, so no rank ever waits for
/// another to finish first. Dropping the driver drains every rank (a failure is fail-stop:
/// a message naming the rank, then abort) before any rank's state is released.
///
/// A step that fails on one rank is returned as that rank's error and the driver refuses
/// further steps: the collectives the other ranks issued have no partner any more (NCCL's
/// model), so the ranks are out of step.
pub struct DataParallel<R: Send + 'static> {
    comms: Vec<Communicator>,
    workers: Vec<Worker<R>>,
    failed: Option<String>,
}

impl<R: Send + 'static> DataParallel<R> {
    /// One thread per communicator (rank), each building its state with `init` on its own
    /// thread. `init` must not issue collectives (the ranks are not in step yet).
    pub fn new<F>(comms: Vec<Communicator>, init: F) -> Result<DataParallel<R>>
    where
        F: Fn(&Communicator) -> Result<R> + Send + Sync + 'static,
    {
        let init = Arc::new(init);
        let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<()>)>();
        let mut dp = DataParallel {
            comms: comms.clone(),
            workers: Vec::with_capacity(comms.len()),
            failed: None,
        };
        for (i, comm) in comms.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel::<Job<R>>();
            let (init, ready) = (init.clone(), ready_tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("graphed-rank-{}", comm.rank()))
                .spawn(move || {
                    let mut state = match init(&comm) {
                        Ok(s) => {
                            let _ = ready.send((i, Ok(())));
                            s
                        }
                        Err(e) => {
                            let _ = ready.send((i, Err(e)));
                            return;
                        }
                    };
                    drop(ready);
                    while let Ok(job) = rx.recv() {
                        // A panicking step answers nothing (its reply sender unwinds away) and
                        // the rank keeps its state, so it can still be drained and released.
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut state)));
                    }
                })
                .map_err(|e| Error::Device {
                    backend: "nccl",
                    reason: format!("could not start the thread of a rank: {e}"),
                })?;
            dp.workers.push(Worker {
                jobs: Some(tx),
                thread: Some(thread),
            });
        }
        drop(ready_tx);
        let mut first = None;
        for (i, r) in ready_rx.iter() {
            if let Err(e) = r {
                tracing::warn!("graphed: rank {} failed to start: {e}", dp.comms[i].rank());
                first.get_or_insert(e);
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(dp),
        }
    }

    /// The ranks' communicators, in the order of the ranks' threads.
    pub fn communicators(&self) -> &[Communicator] {
        &self.comms
    }

    /// Runs `f` on every rank (on the rank's thread, with its communicator and state) and
    /// returns the results in rank order. Every rank receives the step before any result is
    /// awaited. The first failing rank's error is returned, and the driver refuses further
    /// steps after it.
    pub fn run<T, F>(&mut self, f: F) -> Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(&Communicator, &mut R) -> Result<T> + Send + Sync + 'static,
    {
        if let Some(why) = &self.failed {
            return Err(Error::Device {
                backend: "nccl",
                reason: format!("an earlier step failed ({why}); the ranks are out of step"),
            });
        }
        let f = Arc::new(f);
        let (tx, rx) = mpsc::channel::<(usize, Result<T>)>();
        for (i, (w, comm)) in self.workers.iter().zip(&self.comms).enumerate() {
            let (f, tx, comm) = (f.clone(), tx.clone(), comm.clone());
            let job: Job<R> = Box::new(move |state: &mut R| {
                let r = f(&comm, state);
                let _ = tx.send((i, r));
            });
            if let Some(jobs) = &w.jobs {
                let _ = jobs.send(job);
            }
        }
        drop(tx);
        let mut answers: Vec<Option<Result<T>>> = (0..self.workers.len()).map(|_| None).collect();
        for (i, r) in rx.iter() {
            answers[i] = Some(r);
        }
        let mut out = Vec::with_capacity(answers.len());
        let mut first: Option<(usize, Error)> = None;
        for (i, a) in answers.into_iter().enumerate() {
            let rank = self.comms[i].rank();
            match a {
                Some(Ok(v)) => out.push(v),
                Some(Err(e)) => {
                    first.get_or_insert((rank, e));
                }
                None => {
                    first.get_or_insert((
                        rank,
                        Error::Device {
                            backend: "nccl",
                            reason: format!("the step panicked on rank {rank}"),
                        },
                    ));
                }
            }
        }
        match first {
            Some((rank, e)) => {
                tracing::warn!("graphed: a data-parallel step failed on rank {rank}: {e}");
                self.failed = Some(format!("rank {rank}: {e}"));
                Err(e)
            }
            None => Ok(out),
        }
    }

    /// Waits for every rank's device; the first error names its rank.
    pub fn synchronize(&self) -> Result<()> {
        let mut result = Ok(());
        for c in &self.comms {
            let r = c.synchronize_ranks();
            if result.is_ok() {
                result = r;
            }
        }
        result
    }
}

impl<R: Send + 'static> Drop for DataParallel<R> {
    fn drop(&mut self) {
        // Drain before release, across ranks: a rank's memory may be read by another rank's
        // collective until that rank's stream is done, so no state is released before every
        // rank is drained. Freeing now could hand such memory to a new allocation.
        let mut drained = Ok(());
        for c in &self.comms {
            let r = c.drain_ranks_for_release();
            if drained.is_ok() {
                drained = r;
            }
        }
        if let Err(e) = drained {
            eprintln!("graphed: fatal: the data-parallel ranks could not drain before releasing their state: {e}; aborting instead of freeing memory a GPU may still use");
            std::process::abort();
        }
        for w in &mut self.workers {
            w.jobs.take();
        }
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
    }
}
