//! The watcher as an actor: its start (the watch, the catch-up, the periodic reconcile), the
//! notify stream, and the messages it answers.

use super::{MAILBOX, ReconcileReport, Watcher};
use crate::core::error::PipelineError;
use crate::core::status::SourceState;
use actix::prelude::*;
use cairn_ingest::RawEvent;
use cairn_ingest::folder::Consent;

impl Actor for Watcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX);
        self.h.status.register(&self.h.id, &self.h.root.display().to_string());
        // A missing folder is the catch-up's to report (the source is unavailable until it is
        // back, and watched from then on).
        if self.opts.notify
            && self.h.root.is_dir()
            && let Err(e) = self.start_notify(ctx)
        {
            // Without live events the source is still kept current by the periodic and flush
            // scans; the watch is retried at each of them.
            tracing::error!("source `{}`: cannot watch {}: {e}", self.h.id, self.h.root.display());
        }
        self.reconcile(ctx, "catch-up");
        if let Some(every) = self.opts.reconcile_every {
            ctx.run_interval(every, |act, ctx| {
                if act.stopped {
                    return;
                }
                if act.opts.notify && act.notify.is_none() && act.away.is_none() {
                    let _ = act.start_notify(ctx);
                }
                act.reconcile(ctx, "periodic");
            });
        }
    }
}

impl StreamHandler<RawEvent> for Watcher {
    fn handle(&mut self, raw: RawEvent, ctx: &mut Context<Self>) {
        self.push(raw, ctx);
    }

    /// The notify channel closed (the watch was dropped): keep the actor.
    fn finished(&mut self, _: &mut Context<Self>) {}
}

/// A raw event from a replay (the same path notify's events take).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Inject(pub RawEvent);

impl Handler<Inject> for Watcher {
    type Result = ();

    fn handle(&mut self, msg: Inject, ctx: &mut Context<Self>) {
        self.push(msg.0, ctx);
    }
}

/// Make everything seen so far searchable: settle the debouncer, optionally compare the folder
/// with the index (`rescan`), and commit. Answers with the table version.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, PipelineError>")]
pub struct Flush {
    pub rescan: bool,
}

impl Handler<Flush> for Watcher {
    type Result = AtomicResponse<Self, Result<u64, PipelineError>>;

    fn handle(&mut self, msg: Flush, ctx: &mut Context<Self>) -> Self::Result {
        let drained = self.drain(msg.rescan.then(Consent::default), ctx);
        let root = self.h.root.display().to_string();
        AtomicResponse::new(Box::pin(drained.map(move |done, act, _| match done? {
            // An unavailable folder is not up to date: the flush says why.
            (_, Some(ReconcileReport { unavailable: Some(why), .. })) => {
                Err(PipelineError::Unavailable { id: act.h.id.clone(), root, why })
            }
            (version, _) => Ok(version),
        })))
    }
}

/// Compare the folder with the index now (`cairn reconcile`); with `allow_removals`, removals the
/// guard would hold, and those of an empty or other folder, apply.
#[derive(Debug, Message)]
#[rtype(result = "Result<ReconcileReport, PipelineError>")]
pub struct Reconcile {
    pub allow_removals: bool,
}

impl Handler<Reconcile> for Watcher {
    type Result = AtomicResponse<Self, Result<ReconcileReport, PipelineError>>;

    fn handle(&mut self, msg: Reconcile, ctx: &mut Context<Self>) -> Self::Result {
        let consent = Consent { removals: msg.allow_removals, ..Consent::default() };
        let drained = self.drain(Some(consent), ctx);
        AtomicResponse::new(Box::pin(drained.map(|done, _, _| done.map(|(_, r)| r.unwrap_or_default()))))
    }
}

/// Stop watching (shutdown): no more file events are taken; pending ones are processed.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopWatching;

impl Handler<StopWatching> for Watcher {
    type Result = ();

    fn handle(&mut self, _: StopWatching, _: &mut Context<Self>) {
        self.notify = None;
        self.stopped = true;
        self.h.status.set_state(&self.h.id, SourceState::Stopped, None);
    }
}

/// Stop this actor now (its source is being removed).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Close;

impl Handler<Close> for Watcher {
    type Result = ();

    fn handle(&mut self, _: Close, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
