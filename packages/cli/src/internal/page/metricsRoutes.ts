/**
 * The page's `/metrics`, in the OpenMetrics text format (or Prometheus's, for a scraper that does
 * not ask for OpenMetrics), under the page's own credentials:
 * what the database holds at the scrape (messages by topic and state, the oldest ready one's
 * age, paused topics, workflow executions by status and what the suspended wait on, each feed
 * consumer's lag and the horizon's age, each replication slot's WAL), then this process's own
 * Effect metrics (the projector's deliveries, failures and lease losses, when it runs here).
 */
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Feed from "@effect-durable/pg/Feed"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxLog from "@effect-durable/pg/OutboxLog"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Metric from "effect/Metric"
import * as SqlClient from "effect/sql/SqlClient"
import { CONTENT_TYPES, type Family, format, fromSnapshots, negotiate } from "./openMetrics.js"
import { get, type Page } from "./route.js"

/** Every family the database gives, by name: what the dashboard's queries may name (`test/Metrics.test.ts`). */
export const DATABASE_FAMILIES = [
  "effect_durable_outbox_messages",
  "effect_durable_outbox_oldest_ready_seconds",
  "effect_durable_outbox_topic_paused",
  "effect_durable_workflow_executions",
  "effect_durable_workflow_waiting_executions",
  "effect_durable_feed_readable_messages",
  "effect_durable_feed_held_messages",
  "effect_durable_feed_horizon_age_seconds",
  "effect_durable_replication_slot_retained_bytes",
  "effect_durable_scrape_database_up"
] as const

type Name = (typeof DATABASE_FAMILIES)[number]

const gauge = (name: Name, help: string, samples: Family["samples"]): Family => ({
  name,
  type: "gauge",
  help,
  samples
})

const STATES = ["ready", "delayed", "claimed", "dead", "cancelled"] as const

const databaseFamilies = (page: Page) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const topics = yield* Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.stats)
    const statuses = yield* sql<{ workflow: string; status: string; n: number }>`
      SELECT workflow, status, count(*)::int AS n FROM ${sql.literal(settings.table("workflow_executions"))}
       GROUP BY workflow, status ORDER BY workflow, status`
    const waiting = yield* page.workflows.waiting()
    const feed = yield* Feed.Feed
    const consumers = yield* feed.lag()
    const holder = yield* feed.holder
    const slots = yield* Effect.flatMap(OutboxLog.make, (log) => log.status())
    return [
      gauge(
        "effect_durable_outbox_messages",
        "outbox messages open or dead, by topic and state",
        topics.flatMap((t) => STATES.map((state) => ({ labels: { topic: t.topic, state }, value: t[state] })))
      ),
      gauge(
        "effect_durable_outbox_oldest_ready_seconds",
        "how long the oldest ready message of a topic has waited",
        topics.flatMap((t) =>
          t.oldestReadySeconds === null ? [] : [{ labels: { topic: t.topic }, value: t.oldestReadySeconds }]
        )
      ),
      gauge(
        "effect_durable_outbox_topic_paused",
        "1 while a topic is paused",
        topics.map((t) => ({ labels: { topic: t.topic }, value: t.paused ? 1 : 0 }))
      ),
      gauge(
        "effect_durable_workflow_executions",
        "workflow executions by workflow and status",
        statuses.map((row) => ({ labels: { workflow: row.workflow, status: row.status }, value: row.n }))
      ),
      gauge(
        "effect_durable_workflow_waiting_executions",
        "suspended workflow executions by what they wait on",
        // By workflow and kind only: a wait's name may be a tenant's key (a limit's group), one series each.
        Array.from(
          waiting.reduce((sums, w) => {
            const key = JSON.stringify([w.workflow, w.kind])
            return sums.set(key, (sums.get(key) ?? 0) + w.executions)
          }, new Map<string, number>()),
          ([key, executions]) => {
            const [workflow, kind] = JSON.parse(key) as [string, string]
            return { labels: { workflow, kind }, value: executions }
          }
        )
      ),
      gauge(
        "effect_durable_feed_readable_messages",
        "messages a feed consumer can read now (at most 100,000)",
        consumers.map((c) => ({ labels: { consumer: c.name }, value: c.readable }))
      ),
      gauge(
        "effect_durable_feed_held_messages",
        "messages committed past the horizon, waiting for an older transaction (at most 100,000)",
        consumers.map((c) => ({ labels: { consumer: c.name }, value: c.held }))
      ),
      gauge(
        "effect_durable_feed_horizon_age_seconds",
        "how long the oldest writing transaction of the cluster has held the feeds' horizon",
        [{ labels: {}, value: holder?.seconds ?? 0 }]
      ),
      gauge(
        "effect_durable_replication_slot_retained_bytes",
        "WAL a logical replication slot keeps",
        slots.map((slot) => ({ labels: { slot: slot.slot }, value: slot.retainedBytes }))
      )
    ]
  })

/** How long a scrape's database families serve the scrapes after it: the counts read the history too. */
const DATABASE_TTL_MILLIS = 15_000

export const routes = (page: Page) => {
  let cached: { readonly at: number; readonly families: ReadonlyArray<Family> } | undefined
  // The database's families, read at most once per TTL; when it does not answer, only whether it did.
  const fromDatabase = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    if (cached !== undefined && now - cached.at < DATABASE_TTL_MILLIS) return cached.families
    const read = yield* Effect.result(page.queries.timed(databaseFamilies(page)))
    const families = read._tag === "Success" ? read.success : []
    if (read._tag === "Failure") {
      yield* Effect.logWarning(`effect-durable admin: /metrics could not read the database: ${String(read.failure)}`)
    } else cached = { at: now, families }
    return [
      ...families,
      gauge("effect_durable_scrape_database_up", "1 when the scrape read the database", [
        { labels: {}, value: read._tag === "Success" ? 1 : 0 }
      ])
    ]
  })
  return [
    get(
      "/metrics",
      page.route(
        "read",
        "json",
        (r) =>
          Effect.gen(function*() {
            const families = yield* fromDatabase
            const own = fromSnapshots(yield* Metric.snapshot)
            const as = negotiate(r.request.headers["accept"])
            return HttpServerResponse.text(format([...families, ...own], as), {
              contentType: CONTENT_TYPES[as],
              headers: { vary: "accept" }
            })
          })
      )
    )
  ]
}
