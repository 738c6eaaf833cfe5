/**
 * The two leased queues, described once: their tables, claim functions, the column that marks
 * a row done, and the inputs every queue operation decodes. The worker and admin halves of
 * the implementation both read this.
 */
import { ClaimMismatch, MessageMissing, type QueueName } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { Settings } from "../../DurableConfig.js"
import type { Claim } from "../../LeasedQueue.js"
import { CONSUMER_LIMITS, renewableInTime, TOPIC_LIMITS } from "../flow/limits.js"

export interface QueueSpec {
  readonly queue: QueueName
  /** Qualified, quoted table name. */
  readonly table: string
  /** Qualified, quoted name of the queue's claim function (migration 8), and the type of its filter argument. */
  readonly claimFunction: string
  readonly filterType: "text" | "text[]"
  /** Whether the claim takes keyed runs (its sixth argument, migration 12): the outbox's ordering keys. */
  readonly keyedRuns: boolean
  /**
   * The claim's open path (migration 29), the one whose query `explainClaim` explains: its
   * qualified, quoted name, its argument types in order (the claim's, then for the outbox whether
   * the topics asked may have limits), and what `explainClaim` passes after the claim's arguments.
   */
  readonly openClaim: {
    readonly function: string
    readonly arguments: string
    readonly more: string
  }
  /** Qualified, quoted names of the queue's fenced batch writes (migration 10). */
  readonly batchWrites: {
    readonly completeMany: string
    readonly renewMany: string
    readonly giveBackMany: string
    /** Migration 12's: a give-back that also takes back the claim's attempt. */
    readonly giveBackUnstartedMany: string
  }
  /** The column that marks a row done; our constant. */
  readonly done: "projected_at" | "processed_at"
  /**
   * Whether a row leaves the queue's table when it settles (the outbox: into its history and its
   * dead letters, `moves.ts`), or stays in it marked (the inbox, whose rows are its receipts).
   */
  readonly moves: boolean
  /** Qualified, quoted relation every row of the queue is in, settled or not (what reads states). */
  readonly everyRow: string
  /** Qualified, quoted tables of its dead (and cancelled) rows and of its done rows. */
  readonly deadRows: string
  readonly doneRows: string
  /** The history's day keepers (`functions/history.ts`), where done rows are kept by day. */
  readonly days: { readonly prepare: string; readonly emptyBefore: string; readonly dropBefore: string } | undefined
  /**
   * What a lease renewal also asks of the row, given the new lease's seconds (an SQL
   * expression): of a limited topic's message (migration 18) or a limited consumer's entry
   * (migration 25), that the lease still runs, by the clock, a sixth of a lease from now.
   */
  readonly renewable: (leaseSeconds: string) => string
  /** A claim that cannot write; `cancelled` when its row was cancelled. */
  readonly mismatch: (claim: Claim, cancelled?: boolean) => ClaimMismatch
  readonly missing: (messageId: string) => MessageMissing
}

/** Any value as text for an error message, without ever throwing (symbols, hostile toString). */
const shown = (value: unknown): string => {
  if (typeof value === "string") return value
  try {
    return typeof value === "symbol" ? value.toString() : String(value)
  } catch {
    return "(unprintable)"
  }
}

export const specFor = (settings: Settings, queue: QueueName): QueueSpec => ({
  queue,
  table: settings.table(queue),
  claimFunction: settings.table(`${queue}_claim`),
  filterType: queue === "outbox" ? "text[]" : "text",
  keyedRuns: queue === "outbox",
  openClaim: queue === "outbox"
    ? {
      function: settings.table("outbox_claim_open"),
      arguments: "text, integer, double precision, text[], integer, integer, boolean",
      // Topics with limits are left to their own claims, as when a worker claims.
      more: ", false"
    }
    : {
      function: settings.table("inbox_claim_open"),
      arguments: "text, integer, double precision, text, integer",
      more: ""
    },
  batchWrites: {
    completeMany: settings.table(`${queue}_complete_many`),
    renewMany: settings.table(`${queue}_renew_many`),
    giveBackMany: settings.table(`${queue}_give_back_many`),
    giveBackUnstartedMany: settings.table(`${queue}_give_back_unstarted_many`)
  },
  done: queue === "outbox" ? "projected_at" : "processed_at",
  moves: queue === "outbox",
  everyRow: settings.table(queue === "outbox" ? "outbox_messages" : "inbox"),
  deadRows: settings.table(queue === "outbox" ? "outbox_dead" : "inbox"),
  doneRows: settings.table(queue === "outbox" ? "outbox_history" : "inbox"),
  days: queue === "outbox"
    ? {
      prepare: settings.table("outbox_history_prepare"),
      emptyBefore: settings.table("outbox_history_empty_before"),
      dropBefore: settings.table("outbox_history_drop_before")
    }
    : undefined,
  renewable: (leaseSeconds) =>
    renewableInTime(
      settings.table,
      settings.table(queue),
      leaseSeconds,
      queue === "outbox" ? TOPIC_LIMITS : CONSUMER_LIMITS
    ),
  // A malformed claim token is a mismatch too; its parts are shown as safely as they can be.
  mismatch: (claim, cancelled) =>
    new ClaimMismatch({
      queue,
      messageId: shown(claim?.messageId),
      worker: shown(claim?.worker),
      generation: typeof claim?.generation === "number" ? claim.generation : Number.NaN,
      ...(cancelled === true ? { cancelled } : {})
    }),
  missing: (messageId) => new MessageMissing({ queue, messageId })
})

/** Most rows one call may name (ids, claims). */
export const MAX_BATCH = 10_000

const MAX_BIGINT = "9223372036854775807"
const DIGITS = /^[1-9][0-9]{0,18}$/

/**
 * A row id: a positive bigint in decimal, no leading zeros, within PostgreSQL's `bigint`.
 * Checked for every claim a batch write names (500 a mark): digits, then — at 19 digits, as
 * long as the largest — a comparison of the texts, which orders equal-length digit strings as
 * numbers (no `BigInt` per id).
 */
export const isMessageId = (id: unknown): id is string =>
  typeof id === "string" && DIGITS.test(id) && (id.length < MAX_BIGINT.length || id <= MAX_BIGINT)

export const MessageId = Schema.String.check(Schema.makeFilter(
  (id) => isMessageId(id),
  { message: "a message id (a positive integer up to 9223372036854775807, as a string)" }
))

export const decodeWorker = Input.argument("worker", Input.Text(128))
export const decodeLimit = Input.argument("limit", Input.Count(1000))
export const decodeLease = Input.argument("lease", Input.DurationIn({ max: "1 day" }))
export const decodeRetryDelay = Input.argument("retryDelay", Input.DurationIn({ min: 0, max: "365 days" }))
/** The longest error text a release stores, in characters; a longer one is cut, with a marker. */
export const MAX_ERROR_CHARS = 4096

/**
 * Any error text a failed delivery reports is stored: it is a diagnostic, and refusing it
 * would leave the message without its release (delivered again and again, the real error
 * lost). NUL (which PostgreSQL text cannot hold) becomes U+FFFD; past `MAX_ERROR_CHARS` the
 * text is cut at a character boundary and says how long it was.
 */
export const storableError = (error: string): string => {
  const text = error.replace(/\u0000/g, "\uFFFD")
  if (text.length <= MAX_ERROR_CHARS) return text
  const marker = ` … [truncated: ${text.length} characters]`
  let cut = MAX_ERROR_CHARS - marker.length
  // Never split a surrogate pair.
  if (/[\uD800-\uDBFF]/.test(text[cut - 1]!)) cut--
  return text.slice(0, cut) + marker
}

const decodeErrorText = Input.argument("error", Schema.String)
export const decodeError = (error: unknown) => Effect.map(decodeErrorText(error), storableError)
/** Why an operator moved a message aside or cancelled it: said in its `last_error`. */
export const decodeReason = Input.argument("reason", Input.Text(500))
/** Who did (1-128 bytes), recorded with the reason. */
export const decodeMovedBy = Input.argument("by", Schema.UndefinedOr(Input.Text(128)))
export const decodeIds = Input.argument("ids", Schema.Array(MessageId).check(Schema.isMaxLength(MAX_BATCH)))
export const decodeBatchSize = Input.argument("batchSize", Input.Count(MAX_BATCH))
export const decodeMaxLeaseExpiries = Input.argument("maxLeaseExpiries", Input.Count(1000))
export const decodePerKey = Input.argument("perKey", Input.Count(1000))
