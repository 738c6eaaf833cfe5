/**
 * What every worker process of a run (projector or workflow runner) is told, and the
 * substrate it opens from it.
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as Redacted from "effect/Redacted"
import { APPLICATION } from "./schema.js"

export interface WorkerConfig {
  readonly index: number
  /** Stored with each claim; a restarted worker gets a new one, as a restarted process would. */
  readonly workerId: string
  /** The pool's URL: the server, or PgBouncer in front of it. */
  readonly url: string
  /** Behind a pooler: a direct URL for the projector's LISTEN connection (and no prepared statements). */
  readonly listenUrl?: string
  /** The projector lease in ms; absent: the projector's default. */
  readonly leaseMillis?: number
  /** `synchronousWorkerCommits: false`: claims, marks and renewals do not wait for the WAL flush. */
  readonly asyncWorkerCommits?: boolean
  /** Deliver through a batch handler (`--batch`). */
  readonly batch?: boolean
  /** The workflow code this runner deploys (`--deploy`); absent: version A. */
  readonly version?: "A" | "B"
}

/** The worker's substrate: its pool named for the faults to find, unprepared statements behind a pooler. */
export const workerSubstrate = (config: WorkerConfig) =>
  Durable.layer({
    connection: {
      url: Redacted.make(config.url),
      applicationName: APPLICATION.worker(config.index),
      // PgBouncer 1.18 in transaction mode cannot keep named prepared statements.
      preparedStatements: config.listenUrl === undefined
    },
    ...(config.asyncWorkerCommits === true ? { settings: { synchronousWorkerCommits: false } } : {})
  })
