/**
 * The in-memory outbox's flow control, with `FlowControl.setLimit`'s options and decoding: a
 * topic's in-flight limits (the topic's, each group's) and token buckets (the topic's, each
 * group's), on Effect's `Clock`. A claim takes, in its own order, what fits every limit and
 * finds a token in every bucket: in any span `d` at most `burst + limit × d / per` are
 * claimed, as on PostgreSQL. Not here: the weighted fair share between groups (a claim takes
 * groups in due order) and per-group settings (`FlowControl.setGroup`).
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { LimitOptions } from "../../FlowControl.js"
import { decodeLimitOptions, decodeTopic } from "../flow/decode.js"
import { inFlightAt, leaseRunning, open, type Row } from "./memoryRows.js"

interface Rate {
  readonly limit: number
  readonly seconds: number
  readonly burst: number
}

interface Bucket {
  readonly tokens: number
  readonly at: number
}

interface Limit {
  readonly maxInFlight: number | null
  readonly groupMaxInFlight: number | null
  readonly rate: Rate | null
  readonly groupRate: Rate | null
  bucket: Bucket | undefined
  readonly groupBuckets: Map<string, Bucket>
}

/** What the limits read of a message. */
export interface Limited {
  readonly topic: string
  readonly group: string | null
  readonly orderingKey: string | null
}

/** The bucket at `now`: full when new, refilled at the rate since it was last read, never above the burst. */
const refill = (rate: Rate, bucket: Bucket | undefined, now: number): Bucket =>
  bucket === undefined
    ? { tokens: rate.burst, at: now }
    : {
      tokens: Math.min(rate.burst, bucket.tokens + ((now - bucket.at) * rate.limit) / (rate.seconds * 1000)),
      at: now
    }

/** Milliseconds until the bucket holds a whole token (0: it does). */
const untilToken = (rate: Rate, bucket: Bucket) =>
  bucket.tokens >= 1 ? 0 : ((1 - bucket.tokens) * rate.seconds * 1000) / rate.limit

// A changed rate keeps the tokens its bucket holds, at most the new burst.
const kept = (rate: Rate | null, bucket: Bucket | undefined): Bucket | undefined =>
  rate === null || bucket === undefined ? undefined : { tokens: Math.min(rate.burst, bucket.tokens), at: bucket.at }

export const make = () => {
  const limits = new Map<string, Limit>()

  const setLimit = Effect.fnUntraced(function*(topic: string, options: LimitOptions) {
    const decoded = yield* decodeLimitOptions(topic, options)
    const now = yield* Clock.currentTimeMillis
    const before = limits.get(decoded.topic)
    // The buckets brought up to now at the old rate, then kept within the new one.
    const upToNow = (rate: Rate | null | undefined, bucket: Bucket | undefined) =>
      rate === null || rate === undefined || bucket === undefined ? undefined : refill(rate, bucket, now)
    const groupBuckets = new Map<string, Bucket>()
    for (const [group, bucket] of before?.groupBuckets ?? []) {
      const keep = kept(decoded.groupRate, upToNow(before?.groupRate, bucket))
      if (keep !== undefined) groupBuckets.set(group, keep)
    }
    limits.set(decoded.topic, {
      maxInFlight: decoded.maxInFlight,
      groupMaxInFlight: decoded.groupMaxInFlight,
      rate: decoded.rate,
      groupRate: decoded.groupRate,
      bucket: kept(decoded.rate, upToNow(before?.rate, before?.bucket)),
      groupBuckets
    })
  })

  /** Removes a topic's limits; whether it had any. */
  const clear = (topic: string) => Effect.map(decodeTopic(topic), (decoded) => limits.delete(decoded))

  /**
   * The candidates a claim takes, in their order, at most `max`: each within its topic's and its
   * group's in-flight limit (`inFlight` counts the leases running; those taken before it in this
   * claim count too) and with a token in each bucket, which it spends. A keyed message held
   * back holds back the rest of its key (per-key order).
   */
  const admit = <R extends Limited>(
    candidates: ReadonlyArray<R>,
    max: number,
    inFlight: (topic: string, group: string | null | undefined) => number,
    now: number
  ): Array<R> => {
    const taken = new Map<string, number>()
    const count = (key: string, fallback: () => number) => taken.get(key) ?? fallback()
    const heldBack = new Set<string>()
    const admitted: Array<R> = []
    for (const row of candidates) {
      if (admitted.length >= max) break
      if (row.orderingKey !== null && heldBack.has(row.orderingKey)) continue
      const limit = limits.get(row.topic)
      if (limit !== undefined) {
        const topicKey = JSON.stringify([row.topic])
        const groupKey = JSON.stringify([row.topic, row.group])
        const inTopic = count(topicKey, () => inFlight(row.topic, undefined))
        const inGroup = count(groupKey, () => inFlight(row.topic, row.group))
        const bucket = limit.rate === null ? undefined : refill(limit.rate, limit.bucket, now)
        // Per-group limits and rates bind named groups only (a message without a group is in none).
        const grouped = row.group !== null
        const groupBucket = limit.groupRate === null || !grouped
          ? undefined
          : refill(limit.groupRate, limit.groupBuckets.get(row.group), now)
        const fits = (limit.maxInFlight === null || inTopic < limit.maxInFlight) &&
          (limit.groupMaxInFlight === null || !grouped || inGroup < limit.groupMaxInFlight) &&
          (bucket === undefined || bucket.tokens >= 1) && (groupBucket === undefined || groupBucket.tokens >= 1)
        if (!fits) {
          if (row.orderingKey !== null) heldBack.add(row.orderingKey)
          continue
        }
        taken.set(topicKey, inTopic + 1)
        taken.set(groupKey, inGroup + 1)
        if (bucket !== undefined) limit.bucket = { tokens: bucket.tokens - 1, at: now }
        if (groupBucket !== undefined && row.group !== null) {
          limit.groupBuckets.set(row.group, { tokens: groupBucket.tokens - 1, at: now })
        }
      }
      admitted.push(row)
    }
    return admitted
  }

  /**
   * How long until a ready message held back only by a rate may be claimed: the soonest over
   * the ready messages' buckets (zero: a token is there now); none when no ready message is
   * under a rate, or its topic is at its in-flight limit.
   */
  const rateWait = (
    ready: ReadonlyArray<Limited>,
    inFlight: (topic: string) => number,
    now: number
  ): Option.Option<Duration.Duration> => {
    let soonest: number | undefined
    for (const row of ready) {
      const limit = limits.get(row.topic)
      if (limit === undefined || (limit.rate === null && limit.groupRate === null)) continue
      // A topic at its in-flight limit waits for a slot, not a token (PostgreSQL's rateWait skips it too).
      if (limit.maxInFlight !== null && inFlight(row.topic) >= limit.maxInFlight) continue
      const wait = Math.max(
        limit.rate === null ? 0 : untilToken(limit.rate, refill(limit.rate, limit.bucket, now)),
        limit.groupRate === null || row.group === null ?
          0 :
          untilToken(limit.groupRate, refill(limit.groupRate, limit.groupBuckets.get(row.group), now))
      )
      soonest = soonest === undefined ? wait : Math.min(soonest, wait)
    }
    return soonest === undefined ? Option.none() : Option.some(Duration.millis(Math.ceil(soonest)))
  }

  /** `rateWait` over every row of the store, for the topics `only` names (null: all). */
  const rateWaitOver = (all: ReadonlyArray<Row>, only: ReadonlyArray<string> | null, now: number) =>
    rateWait(
      all.filter((row) =>
        open(row) && row.availableAt <= now && !leaseRunning(row, now) && (only === null || only.includes(row.topic))
      ),
      inFlightAt(all, now),
      now
    )

  return { setLimit, clear, admit, rateWait: rateWaitOver }
}
