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
  "effect_durable_replication_slot_retained_bytes"
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
        waiting.map((w) => ({ labels: { workflow: w.workflow, kind: w.kind, name: w.name }, value: w.executions }))
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

export const routes = (page: Page) => [
  get(
    "/metrics",
    page.route(
      "read",
      "json",
      (r) =>
        Effect.gen(function*() {
          const families = yield* page.queries.timed(databaseFamilies(page))
          const own = fromSnapshots(yield* Metric.snapshot)
          const as = negotiate(r.request.headers["accept"])
          return HttpServerResponse.text(format([...families, ...own], as), { contentType: CONTENT_TYPES[as] })
        })
    )
  )
]
