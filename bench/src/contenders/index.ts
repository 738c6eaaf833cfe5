// Every queue contender, in the order the bench alternates them.
import type { QueueContender } from "../common.js"
import * as EffectDurable from "./effectDurable.js"
import * as GraphileWorker from "./graphileWorker.js"
import * as PersistedQueue from "./persistedQueue.js"
import * as PgBoss from "./pgBoss.js"
import * as RawSql from "./rawSql.js"

export const all: ReadonlyArray<QueueContender> = [
  EffectDurable.defaults,
  EffectDurable.tuned,
  EffectDurable.asyncCommits,
  GraphileWorker.fastest,
  GraphileWorker.defaults,
  PgBoss.tuned,
  PersistedQueue.tuned,
  RawSql.atDefaults
]

export { EffectDurable, GraphileWorker, PersistedQueue, PgBoss, RawSql }
