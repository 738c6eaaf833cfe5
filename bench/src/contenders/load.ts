// The drain process finds its contender here (see drainWorker.ts).
import type { QueueContender } from "../common.js"

/**
 * Finds contender `name` loading only its own module, so that a drain process holds that
 * library alone and its peak RSS is the library's.
 */
export const load = async (name: string): Promise<QueueContender> => {
  const modules: ReadonlyArray<readonly [string, () => Promise<Record<string, unknown>>]> = [
    ["effect-durable", () => import("./effectDurable.js")],
    ["graphile-worker", () => import("./graphileWorker.js")],
    ["pg-boss", () => import("./pgBoss.js")],
    ["PersistedQueue", () => import("./persistedQueue.js")],
    ["raw SQL", () => import("./rawSql.js")]
  ]
  const entry = modules.find(([prefix]) => name.startsWith(prefix))
  const exported = entry === undefined ? [] : Object.values(await entry[1]())
  const found = exported.find((value): value is QueueContender =>
    typeof value === "object" && value !== null && (value as QueueContender).name === name
  )
  if (found === undefined) throw new Error(`no contender named ${JSON.stringify(name)}`)
  return found
}
