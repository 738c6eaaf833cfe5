/**
 * The command line of `npm run chaos`: what a run does and how big it is. Quick is the CI
 * smoke run (about two minutes with a 5 s lease, three with the default 30 s); full is the
 * long schedule (about 15).
 */
import { parseArgs } from "node:util"

export interface Options {
  readonly quick: boolean
  /** The projector lease in ms; undefined: the projector's default. */
  readonly leaseMillis: number | undefined
  readonly workers: number
  /** Commands to produce; undefined: about 100 a second over the production window. */
  readonly messages: number | undefined
  /** Everything through PgBouncer in transaction mode (scripts/pgbouncer.sh). */
  readonly pooler: boolean
  readonly seed: number
  /** Keep the run directory (journal, worker logs) instead of deleting it. */
  readonly keep: boolean
  /** The workers' claims, marks and renewals commit without waiting for the WAL flush (`synchronousWorkerCommits: false`). */
  readonly asyncWorkerCommits: boolean
  /** The workflow schedule: `PgWorkflowEngine` runners, orders started and approved by the producer. */
  readonly workflows: boolean
  /**
   * Flow limits on the chaos topic (`FlowControl`): at most `FLOW_LIMIT` in flight, `FLOW_GROUP_LIMIT`
   * per customer group, and the rates `FLOW_RATE` and `FLOW_GROUP_RATE`; an overshoot checker
   * inside the database counts at every claim and records every claimed message against the
   * buckets.
   */
  readonly limits: boolean
  /**
   * The chaos topic with only an in-flight limit, `FLOW_LIMIT`, and no groups: its claims take
   * capacity slots (migration 27) instead of the limits row; the same overshoot checker.
   */
  readonly slots: boolean
  /**
   * The workers deliver through a batch handler (`Publisher.layerBatchHandler`, `BATCH` per call
   * with a short `maxWait`): one recorded delivery statement and one pause per call, each
   * message's effect applied on its own and reported failed on its own.
   */
  readonly batch: boolean
  /**
   * With `--workflows`: a rolling deploy under the faults — the runners, all of code version A at
   * first, replaced one by one by version B (`workflows/deploy.ts`): one compatible change, one
   * incompatible guarded by a patch, one incompatible left unguarded.
   */
  readonly deploy: boolean
  /** The feed's schedule (`feeds/main.ts`): late commits, consumers killed, PostgreSQL restarted. */
  readonly feeds: boolean
}

/** With `--batch`: the most messages per handler call, and how long a short batch waits to fill. */
export const BATCH = { maxSize: 20, maxWait: "100 millis" } as const

/** The chaos topic's limits with `--limits`, and how many customer groups the producer spreads its messages over. */
export const FLOW_LIMIT = 48
export const FLOW_GROUP_LIMIT = 8
export const FLOW_GROUPS = 10
/**
 * Rates that bind while a backlog drains after a fault (the producer writes about 30 a second)
 * and leave headroom to catch up: 60 a second for the topic, 10 for each of its groups.
 */
export const FLOW_RATE = { limit: 60, per: "1 second", burst: 30 } as const
export const FLOW_GROUP_RATE = { limit: 10, per: "1 second", burst: 5 } as const

/**
 * With `--workflows --limits`: the limits on `ChaosOrder`'s runs, grouped by customer (the order's
 * number modulo `FLOW_GROUPS`). In flight only: a rate on runs would count replays.
 */
export const WORKFLOW_FLOW_LIMIT = 6
export const WORKFLOW_GROUP_LIMIT = 1

/** A rate as the report says it. */
export const rateText = (rate: { readonly limit: number; readonly per: string; readonly burst: number }) =>
  `${rate.limit} per ${rate.per}, burst ${rate.burst}`

/** The limits of `--limits` or `--slots`, as the report says them. */
export const limitsText = (options: Options): string =>
  options.workflows
    ? `${WORKFLOW_FLOW_LIMIT} runs in flight, ${WORKFLOW_GROUP_LIMIT} per customer group of ${FLOW_GROUPS}`
    : options.slots
    ? `${FLOW_LIMIT} in flight, no groups or rates: claims take capacity slots`
    : `${FLOW_LIMIT} in flight, ${FLOW_GROUP_LIMIT} per group of ${FLOW_GROUPS}, rates ${rateText(FLOW_RATE)} and ${
      rateText(FLOW_GROUP_RATE)
    } per group`

/** The projector's default lease (`@effect-durable/projector` Projector.ts), used to size stalls. */
export const PROJECTOR_DEFAULT_LEASE_MILLIS = 30_000

export const USAGE =
  "usage: npm run chaos -- [--quick] [--lease=5s] [--workers=4] [--messages=N] [--pooler] [--async-worker-commits] [--workflows [--deploy] | --feeds] [--limits | --slots] [--batch] [--seed=N] [--keep]"

const parseDuration = (text: string): number => {
  const match = /^(\d+(?:\.\d+)?)\s*(ms|s|m)?$/.exec(text.trim())
  if (match === null) throw new Error(`--lease: "${text}" is not a duration like 5s, 500ms or 1m`)
  const value = Number(match[1]) * ({ ms: 1, s: 1000, m: 60_000 }[match[2] as "ms" | "s" | "m" ?? "s"])
  if (!(value >= 100 && value <= 600_000)) throw new Error(`--lease: between 100ms and 10m, got ${text}`)
  return value
}

const parseCount = (name: string, text: string, max: number): number => {
  const value = Number(text)
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new Error(`--${name}: an integer from 1 to ${max}, got ${text}`)
  }
  return value
}

export const parse = (args: ReadonlyArray<string>): Options => {
  const { values } = parseArgs({
    args: [...args],
    strict: true,
    options: {
      quick: { type: "boolean", default: false },
      lease: { type: "string" },
      workers: { type: "string", default: "4" },
      messages: { type: "string" },
      pooler: { type: "boolean", default: false },
      seed: { type: "string" },
      keep: { type: "boolean", default: false },
      "async-worker-commits": { type: "boolean", default: false },
      workflows: { type: "boolean", default: false },
      limits: { type: "boolean", default: false },
      slots: { type: "boolean", default: false },
      batch: { type: "boolean", default: false },
      deploy: { type: "boolean", default: false },
      feeds: { type: "boolean", default: false },
      help: { type: "boolean", default: false }
    }
  })
  if (values.help) {
    console.log(USAGE)
    process.exit(0)
  }
  const quick = values.quick
  if (values.limits && values.slots) throw new Error("--limits and --slots: one or the other")
  if (values.batch && values.workflows) throw new Error("--batch is for the outbox schedule, not --workflows")
  if (values.deploy && !values.workflows) throw new Error("--deploy is for --workflows")
  if (values.feeds && (values.workflows || values.limits || values.slots || values.batch || values.pooler)) {
    throw new Error("--feeds runs its own schedule: it takes --quick, --seed and --keep")
  }
  if (values.slots && values.workflows) {
    throw new Error("--slots is for the outbox schedule; --workflows takes --limits")
  }
  return {
    quick,
    leaseMillis: values.lease === undefined ? undefined : parseDuration(values.lease),
    workers: parseCount("workers", values.workers, 16),
    messages: values.messages === undefined ? undefined : parseCount("messages", values.messages, 1_000_000),
    pooler: values.pooler,
    seed: values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : parseCount("seed", values.seed, 2 ** 31),
    keep: values.keep,
    asyncWorkerCommits: values["async-worker-commits"],
    workflows: values.workflows,
    limits: values.limits,
    slots: values.slots,
    batch: values.batch,
    deploy: values.deploy,
    feeds: values.feeds
  }
}
