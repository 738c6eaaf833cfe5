/**
 * What an enqueue checks before it writes, for the PostgreSQL outbox and the in-memory one
 * alike: the topic, every option, the payload as canonical JSON within its size, the headers
 * (with the caller's trace). A bad message is a typed error naming its argument, and nothing is
 * written.
 */
import { InvalidInput, PayloadTooLarge } from "@effect-durable/core/Errors"
import { canonicalize, canonicalizeWithin } from "@effect-durable/core/Fingerprint"
import * as Input from "@effect-durable/core/Input"
import * as Traceparent from "@effect-durable/core/Traceparent"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import type { EnqueueOptions, NewMessage } from "../../Outbox.js"

/** Largest headers object, as canonical JSON bytes. */
const MAX_HEADER_BYTES = 16 * 1024

export const DEDUP_MODES = ["keep", "replace", "extend"] as const

const decodeTopic = Input.argument("topic", Input.Text(128))
const decodeOrderingKey = Input.argument("orderingKey", Input.Text(256))
const decodeDelay = Input.argument("delay", Input.DurationIn({ min: 0, max: "365 days" }))
const decodeHeaders = Input.argument("headers", Schema.Record(Input.Text(256), Input.OptionalText(MAX_HEADER_BYTES)))
const decodeDedupKey = Input.argument("dedupKey", Input.Text(256))
const decodeDedupMode = Input.argument("dedupMode", Schema.Literals(DEDUP_MODES))
const decodeGroup = Input.argument("group", Input.Text(128))
const decodeMaxWait = Input.argument("maxWait", Input.DurationIn({ min: 0, max: "30 days" }))

export interface Limits {
  readonly maxPayloadBytes: number
  readonly maxAttempts: number
  readonly maxAttemptsByTopic: Readonly<Record<string, number>>
}

/** The caller's span as a W3C `traceparent`, when there is one: carried in the message's headers. */
export const traceparent = Traceparent.current

const decodeCount = Input.argument("messages", Input.Count(100_000))

/** The message as it will be written: canonical JSON text, seconds, the group ("" for none). */
export const make = ({ maxAttempts, maxAttemptsByTopic, maxPayloadBytes }: Limits) =>
(
  topic: string,
  payload: unknown,
  enqueueOptions: EnqueueOptions,
  trace: Option.Option<string>
) =>
  Effect.gen(function*() {
    yield* decodeTopic(topic)
    const orderingKey = enqueueOptions.orderingKey === undefined
      ? null
      : yield* decodeOrderingKey(enqueueOptions.orderingKey)
    const delay = enqueueOptions.delay === undefined ? Duration.zero : yield* decodeDelay(enqueueOptions.delay)
    const json = yield* Effect.fromResult(Result.mapError(
      canonicalizeWithin(payload, maxPayloadBytes),
      (error) => error._tag === "PayloadTooLarge" ? new PayloadTooLarge({ ...error, topic }) : error
    ))
    const headers: Record<string, string> = { ...(yield* decodeHeaders(enqueueOptions.headers ?? {})) }
    if (Option.isSome(trace) && headers.traceparent === undefined) headers.traceparent = trace.value
    const headersJson = yield* canonicalize(headers)
    if (Buffer.byteLength(headersJson) > MAX_HEADER_BYTES) {
      return yield* new InvalidInput({ argument: "headers", rule: `at most ${MAX_HEADER_BYTES} bytes as JSON` })
    }
    const dedupKey = enqueueOptions.dedupKey === undefined ? null : yield* decodeDedupKey(enqueueOptions.dedupKey)
    const dedupMode = enqueueOptions.dedupMode === undefined
      ? "keep" as const
      : yield* decodeDedupMode(enqueueOptions.dedupMode)
    if (dedupKey === null && enqueueOptions.dedupMode !== undefined) {
      return yield* new InvalidInput({ argument: "dedupMode", rule: "only with a dedupKey" })
    }
    const group = enqueueOptions.group === undefined ? "" : yield* decodeGroup(enqueueOptions.group)
    const maxWait = enqueueOptions.maxWait === undefined
      ? Duration.zero
      : yield* decodeMaxWait(enqueueOptions.maxWait)
    return {
      dedupKey,
      dedupMode,
      group,
      topic,
      orderingKey,
      payload: json,
      headers: headersJson,
      delaySeconds: Duration.toMillis(delay) / 1000,
      /** When it is due, from now: its delay plus its wait (`due_at`). */
      dueSeconds: (Duration.toMillis(delay) + Duration.toMillis(maxWait)) / 1000,
      // Its own key only: a topic named `valueOf` or `constructor` is a topic, not Object's.
      maxAttempts: Object.hasOwn(maxAttemptsByTopic, topic) ? maxAttemptsByTopic[topic]! : maxAttempts
    }
  })

/**
 * `enqueueMany`'s checks: at most 100,000 messages, each checked as `enqueue` checks it, and no
 * dedup key (a deduplicated message is enqueued one at a time). Every message is checked before
 * any is written.
 */
export const many = (limits: Limits) => {
  const prepare = make(limits)
  return (messages: ReadonlyArray<NewMessage>, trace: Option.Option<string>) =>
    Effect.gen(function*() {
      yield* decodeCount(messages.length)
      const rows = yield* Effect.forEach(messages, (m) => prepare(m.topic, m.payload, m.options ?? {}, trace))
      if (rows.some((row) => row.dedupKey !== null)) {
        return yield* new InvalidInput({
          argument: "dedupKey",
          rule: "one message at a time: enqueue, not enqueueMany"
        })
      }
      return rows
    })
}
