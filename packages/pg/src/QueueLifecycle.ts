/**
 * The life of a queue row as SQL, for code that reads the substrate's tables directly (the
 * admin page's own queries, tests, the chaos suite): each state's predicate over the row's
 * columns, a row's state as text, and the counters — the very text the substrate's own
 * statements use, so a tool never spells a state again. Every fragment is plain SQL over
 * unqualified columns (or over `alias.` columns with `forOutbox(alias)` / `forInbox(alias)`).
 *
 * @since 0.2.0
 */
import * as Lifecycle from "./internal/queue/lifecycle.js"

export { diedPermanently, OUTBOX_STATE_NAMES, PERMANENT_FAILURE, STATES } from "./internal/queue/lifecycle.js"
export type { Lifecycle, OutboxStateName, Reopening, State } from "./internal/queue/lifecycle.js"

/** The outbox's row lifecycle (its done state is `projected`), over columns of `alias` when given. */
export const forOutbox = (alias?: string): Lifecycle.Lifecycle =>
  Lifecycle.make({ queue: "outbox", done: "projected_at" }, alias)

/** The stored inbox's row lifecycle (its done state is `processed`), over columns of `alias` when given. */
export const forInbox = (alias?: string): Lifecycle.Lifecycle =>
  Lifecycle.make({ queue: "inbox", done: "processed_at" }, alias)

/** The outbox's, over unqualified columns. */
export const outbox: Lifecycle.Lifecycle = forOutbox()

/** The stored inbox's, over unqualified columns. */
export const inbox: Lifecycle.Lifecycle = forInbox()

/**
 * What a transition that reopens an outbox row `q` (redrive, replay, restore) also asks of it,
 * among the rows of the relation `asked` (its `id`s): its dedup key is not held by an open
 * message, and it is the first row asked with that key. `tables`: the qualified table of open
 * messages, and the one the rows come from (the dead letters, the history).
 */
export const reopenable = (
  tables: { readonly open: string; readonly from: string },
  transition: Lifecycle.Reopening
): string => Lifecycle.reopenable({ queue: "outbox", done: "projected_at" }, tables, transition)
