// The admin page's server side, over HTTP without a browser (so it is proven where no
// Chromium is installed too): the statement timeout bounds every query, a mounted page logs
// the operator the application names, links follow the mount, readiness follows the schema.
import * as Durable from "@effect-durable/pg/Durable"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Feed from "@effect-durable/pg/Feed"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Schedules from "@effect-durable/pg/Schedules"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as SqlClient from "effect/sql/SqlClient"
import { createServer } from "node:http"
import * as AdminPage from "../src/AdminPage.js"
import { deadLetters, freshTopic, portOf, Substrate } from "./support.js"

const logged: Array<string> = []

const Server = HttpRouter.serve(Layer.mergeAll(
  AdminPage.layer({
    mount: "/ops/durable",
    operator: (request) => Effect.succeed(request.headers["x-test-user"]),
    statementTimeout: "300 millis"
  }),
  AdminPage.layer({ mount: "/inner", basePath: "/proxy/durable" }),
  // A page over a schema nobody migrated: not ready.
  AdminPage.layer({ mount: "/empty" }).pipe(
    Layer.provide(Durable.layerOver({ settings: { schema: "never_migrated" }, checkSchemaVersion: false }))
  )
)).pipe(
  Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })),
  Layer.provide(Logger.layer([Logger.make(({ message }) => void logged.push(String(message)))]))
)

const Live = Server.pipe(Layer.provideMerge(Substrate))

const get = (path: string, init: RequestInit = {}) =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.promise(async () => {
      const response = await fetch(`http://127.0.0.1:${portOf(server)}${path}`, init)
      return { status: response.status, body: await response.text() }
    }))

/** A limits action of the page (`set`, `clear`, `inbox-set`, `inbox-clear`) posted by user fay. */
const limitAction = (verb: string, body: unknown) =>
  get(`/ops/durable/limits/actions/${verb}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-test-user": "fay" },
    body: JSON.stringify(body)
  })

describe("admin page over HTTP", () => {
  it.layer(Live, { timeout: "120 seconds" })((it) => {
    it.effect("every page query runs under the statement timeout: a locked outbox is a 503 with the cause, not a hang", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = (yield* DurableSettings).table("outbox")
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
          yield* Deferred.succeed(locked, undefined)
          yield* Deferred.await(release)
        })).pipe(Effect.forkChild)
        yield* Deferred.await(locked)
        const started = Date.now()
        const page = yield* get("/ops/durable/messages")
        const api = yield* get("/ops/durable/api/stats")
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        expect(page.status).toBe(503) // the list shows the failure in place of the table
        expect(page.body).toContain("canceling statement due to statement timeout")
        expect(api.status).toBe(503)
        expect(JSON.parse(api.body).error).toContain("[57014]")
        expect(Date.now() - started).toBeLessThan(5_000)
      }))

    it.effect("mounted without credentials, the page logs the operator the application names with each action", () =>
      Effect.gen(function*() {
        const topic = freshTopic("operator")
        const response = yield* get("/ops/durable/actions/pause", {
          method: "POST",
          headers: { "content-type": "application/json", "x-test-user": "alice@example.com" },
          body: JSON.stringify({ topic })
        })
        expect(response.status).toBe(200)
        expect(logged).toContainEqual(
          expect.stringMatching(new RegExp(`^effect-durable admin: pause topic ${topic} by alice@example.com from `))
        )
        const paused = yield* Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.paused)
        expect(paused.find((p) => p.topic === topic)).toMatchObject({ pausedBy: "alice@example.com" })
        const [id] = yield* deadLetters(freshTopic("operator-dl"), 1)
        const redriven = yield* get("/ops/durable/actions/redrive", {
          method: "POST",
          headers: { "content-type": "application/json", "x-test-user": "bob" },
          body: JSON.stringify({ ids: [id] })
        })
        expect(JSON.parse(redriven.body)).toEqual({ ids: [id] })
        expect(logged).toContainEqual(
          `effect-durable admin: redrive of 1 outbox message(s) ${id} by bob from 127.0.0.1`
        )
        expect(logged.join("\n")).not.toContain("\"n\"") // ids and counts, never payloads
      }))

    it.effect("links follow the mount, or the base path a proxy needs", () =>
      Effect.gen(function*() {
        const mounted = yield* get("/ops/durable")
        expect(mounted.body).toContain(`<link rel="stylesheet" href="/ops/durable/assets/app.css">`)
        expect(mounted.body).toContain(`<a href="/ops/durable/messages">Messages</a>`)
        const proxied = yield* get("/inner/")
        expect(proxied.body).toContain(`<a href="/proxy/durable/messages">Messages</a>`)
        const bad = yield* get("/ops/durable/messages?state=bogus&topic=orders")
        expect(bad.status).toBe(400)
        expect(bad.body).toContain("invalid filter.state")
        expect(bad.body).toContain(`value="orders"`) // the form keeps the filter, to fix it
        const missing = yield* get("/ops/durable/nowhere")
        expect(missing.status).toBe(404)
        const put = yield* get("/ops/durable/messages", { method: "PUT" })
        expect(put.status).toBe(405)
      }))

    it.effect("workflows: names escaped in the list and the execution's page, payloads hidden, bad filters 400, unknown 404, actions logged", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status, result)
                   VALUES ('Page<script>', 'e/1?x', '{"card":"4242"}', 'f', 'suspended', '{"_tag":"Suspended"}')`
        const list = yield* get("/ops/durable/workflows?workflow=Page%3Cscript%3E")
        expect(list.status).toBe(200)
        expect(list.body).toContain("Page&lt;script&gt;")
        expect(list.body).not.toContain("Page<script>")
        expect(list.body).toContain(`href="/ops/durable/workflows/Page%3Cscript%3E/e%2F1%3Fx"`)
        // The filter offers this database's workflow names (escaped too), not an example's.
        const all = yield* get("/ops/durable/workflows")
        expect(all.body).toContain(`<option value="Page&lt;script&gt;"></option>`)
        expect(all.body).not.toContain("PlaceOrder")
        // A long id shows its short form, the whole id in its title; its link and page use the whole id.
        const long = `fedcba98${"7".repeat(56)}`
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status)
                   VALUES ('Hashed', ${long}, '{}', 'f', 'running')`
        const hashed = yield* get("/ops/durable/workflows?workflow=Hashed")
        expect(hashed.body).toContain(`<code class="id" title="${long}">${long.slice(0, 12)}</code>`)
        // The unfinished by deploy version (none recorded: "-"), the diverged and stranded counted.
        expect(hashed.body).toMatch(
          /<table id="versions">.*<tr><td>Hashed<\/td><td>-<\/td><td class="num">1<\/td><td class="num">0<\/td><td class="num">0<\/td>/s
        )
        expect(hashed.body).toContain(`href="/ops/durable/workflows/Hashed/${long}"`)
        // A short id is shown whole (escaped, as everything the page shows).
        expect(list.body).toContain(`<code class="id" title="e/1?x">e/1?x</code>`)
        const shown = yield* get("/ops/durable/workflows/Page%3Cscript%3E/e%2F1%3Fx")
        expect(shown.status).toBe(200)
        expect(shown.body).toContain("<code>e/1?x</code>")
        expect(shown.body).not.toContain("4242") // payloads hidden unless the page shows them
        expect((yield* get("/ops/durable/workflows?status=stuck")).status).toBe(400)
        expect((yield* get("/ops/durable/workflows/Page%3Cscript%3E/nope")).status).toBe(404)
        // A path that is not valid percent-encoding matches no route exactly: not found, as for messages.
        expect((yield* get("/ops/durable/workflows/Page/%E0%A4%A")).status).toBe(404)
        const resumed = yield* get("/ops/durable/workflows/actions/resume", {
          method: "POST",
          headers: { "content-type": "application/json", "x-test-user": "carol" },
          body: JSON.stringify({ workflow: "Page<script>", executionId: "e/1?x" })
        })
        expect(JSON.parse(resumed.body)).toEqual({ workflow: "Page<script>", executionId: "e/1?x", changed: true })
        expect(logged).toContainEqual(
          expect.stringMatching(/^effect-durable admin: resume workflow Page<script> execution e\/1\?x by carol from /)
        )
        const refused = yield* get("/ops/durable/workflows/actions/interrupt", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ workflow: "x".repeat(300), executionId: "e" })
        })
        expect([refused.status, JSON.parse(refused.body).error]).toEqual([400, expect.stringMatching(/workflow/)])
      }))

    it.effect("workflows: what a suspended execution waits on, in the list, on its page (a child linked) and counted, escaped", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status,
                                                           result, waiting_on)
                   VALUES ('Waits', 'w-1', '{}', 'f', 'suspended', '{"_tag":"Suspended"}',
                           '[{"kind":"deferred","name":"Signed<b>"},{"kind":"child","workflow":"Kid","executionId":"k/1"}]'),
                          ('Kid', 'k/1', '{}', 'f', 'suspended', '{"_tag":"Suspended"}', '[{"kind":"resume"}]')`
        const list = yield* get("/ops/durable/workflows?workflow=Waits")
        expect(list.body).toContain("<th>Waiting on</th>")
        expect(list.body).toContain(`<td class="waits">deferred Signed&lt;b&gt;, child Kid k/1</td>`)
        expect(list.body).toContain(`<table id="waiting">`)
        expect(list.body).toMatch(/<tr><td>Waits<\/td><td>deferred Signed&lt;b&gt;<\/td><td class="num">1<\/td>/)
        const shown = yield* get("/ops/durable/workflows/Waits/w-1")
        expect(shown.body).toContain("<dt>Waiting on</dt>")
        expect(shown.body).toContain("<li>deferred Signed&lt;b&gt;</li>")
        expect(shown.body).toContain(`href="/ops/durable/workflows/Kid/k%2F1"`)
        expect(shown.body).toContain("(suspended)")
        const kid = yield* get("/ops/durable/workflows/Kid/k%2F1")
        expect(kid.body).toContain("<li>an operator&#39;s resume (its run failed)</li>")
        // Searchable attributes: shown (escaped) and filtered by; a malformed filter is the request's fault.
        yield* sql`UPDATE durable.workflow_executions SET attributes = '{"tenant":"a<b"}' WHERE execution_id = 'w-1'`
        const byAttribute = yield* get("/ops/durable/workflows?attribute=tenant%3Da%3Cb")
        expect(byAttribute.body).toContain(`<td class="attributes">tenant=a&lt;b</td>`)
        expect(byAttribute.body).toContain(`data-execution="w-1"`)
        expect(byAttribute.body).not.toContain(`data-execution="k/1"`)
        expect((yield* get("/ops/durable/workflows?attribute=tenant")).status).toBe(400)
        // A pending execution of a limited workflow waits on its limit; its group is on its page, escaped.
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status,
                                                           run_group)
                   VALUES ('PageCharge', 'p-1', '{}', 'f', 'pending', 'acme<b>')`
        yield* sql`INSERT INTO durable.flow_limits (topic, group_max_in_flight, updated_by)
                   VALUES ('workflow.run:PageCharge', 1, 'test')`
        const limited = yield* get("/ops/durable/workflows?workflow=PageCharge")
        expect(limited.body).toContain(`<td class="waits">the workflow&#39;s limit (group acme&lt;b&gt;)</td>`)
        expect(limited.body).toMatch(/<tr><td>PageCharge<\/td><td>limit acme&lt;b&gt;<\/td><td class="num">1<\/td>/)
        expect((yield* get("/ops/durable/workflows/PageCharge/p-1")).body).toContain(
          "<dt>Group</dt><dd>acme&lt;b&gt;</dd>"
        )
        // The Limits view of a later test starts with none.
        yield* sql`DELETE FROM durable.flow_limits WHERE topic = 'workflow.run:PageCharge'`
      }))

    it.effect("feeds: each consumer with what it read, can read and waits for, escaped; and what holds the horizon", () =>
      Effect.gen(function*() {
        const feed = yield* Feed.Feed
        const outbox = yield* Outbox.Outbox
        const topic = freshTopic("feed<i>")
        yield* feed.register("index<b>", { topics: [topic] })
        yield* outbox.enqueueMany([1, 2].map((n) => ({ topic, payload: { n } })))
        // On the page with the default statement timeout (5 s): the view's first statement on a
        // new connection plans over every day of the history, which on PostgreSQL 15 took 0.5 s.
        const page = yield* get("/inner/feeds")
        expect(page.status).toBe(200)
        // Read 0; the two messages readable or held (a writing transaction elsewhere in the
        // cluster may hold the horizon for a moment): 2 either way.
        const row =
          /<tr data-consumer="index&lt;b&gt;"><td>index&lt;b&gt;<\/td><td>[^<]*<\/td><td class="num">0<\/td><td class="num">(\d+)<\/td><td class="num">(\d+)<\/td>/
            .exec(page.body)
        expect(Number(row![1]) + Number(row![2])).toBe(2)
        expect(page.body).toContain(topic.replace("<", "&lt;").replace(">", "&gt;"))
        expect(page.body).toMatch(/id="horizon"/)
        expect(page.body).toMatch(/href="[^"]*\/feeds"/)
      }))

    it.effect("schedules: listed with their next slot and counts, escaped; pause and resume act and are logged; a read of an unknown one changes nothing", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        yield* schedules.define({ name: "report<b>", cron: "0 3 * * *", timeZone: "Europe/Berlin", topic: "reports" })
        const page = yield* get("/ops/durable/schedules")
        expect(page.status).toBe(200)
        expect(page.body).toContain("report&lt;b&gt;")
        expect(page.body).toContain("<code>0 3 * * *</code> Europe/Berlin")
        expect(page.body).toContain(`data-action="schedule-pause" data-schedule="report&lt;b&gt;"`)
        const act = (verb: string, name: string) =>
          get(`/ops/durable/schedules/actions/${verb}`, {
            method: "POST",
            headers: { "content-type": "application/json", "x-test-user": "dana" },
            body: JSON.stringify({ name })
          })
        expect(JSON.parse((yield* act("pause", "report<b>")).body)).toEqual({ name: "report<b>", changed: true })
        expect(JSON.parse((yield* act("pause", "nobody")).body)).toEqual({ name: "nobody", changed: false })
        expect(logged).toContainEqual(
          expect.stringMatching(/^effect-durable admin: pause schedule report<b> by dana from /)
        )
        const paused = yield* get("/ops/durable/schedules")
        expect(paused.body).toContain(`data-action="schedule-resume"`)
        expect((yield* schedules.list).find((x) => x.name === "report<b>")).toMatchObject({
          paused: true,
          pausedBy: "dana"
        })
        expect(JSON.parse((yield* act("resume", "report<b>")).body)).toEqual({ name: "report<b>", changed: true })
      }))

    it.effect("limits: set from the page (logged with who), listed escaped with what is in flight, refused when bad, cleared", () =>
      Effect.gen(function*() {
        expect((yield* get("/ops/durable/limits")).body).toContain("No limits.")
        const set = yield* limitAction("set", { topic: "mail<x>", maxInFlight: 20, groupMaxInFlight: 2 })
        expect([set.status, JSON.parse(set.body)]).toEqual([200, { topic: "mail<x>", changed: true }])
        expect(logged).toContainEqual(
          expect.stringMatching(
            /^effect-durable admin: set limits of topic mail<x>: max 20, per group 2, rate none, per-group rate none by fay from /
          )
        )
        const page = yield* get("/ops/durable/limits")
        expect(page.body).toContain(`<tr data-topic="mail&lt;x&gt;"><td>mail&lt;x&gt;</td><td class="num">0</td>`)
        expect(page.body).toContain(`<td class="num max">20</td><td class="num group-max">2</td>`)
        expect(page.body).toContain(`data-action="limit-clear" data-topic="mail&lt;x&gt;"`)
        const flow = yield* FlowControl.FlowControl
        expect((yield* flow.limits).find((l) => l.topic === "mail<x>")).toMatchObject({
          maxInFlight: 20,
          groupMaxInFlight: 2,
          updatedBy: "fay (admin page)"
        })
        const bad = yield* limitAction("set", { topic: "mail<x>", maxInFlight: 0 })
        expect([bad.status, JSON.parse(bad.body).error]).toEqual([400, expect.stringMatching(/maxInFlight/)])
        expect((yield* flow.limits).find((l) => l.topic === "mail<x>")!.maxInFlight).toBe(20)
        // Rates: as the CLI writes them; listed with the bucket's tokens; refused when bad, naming the field.
        const rated = yield* limitAction("set", {
          topic: "mail<x>",
          maxInFlight: 20,
          rate: "10/1m",
          burst: 4,
          groupRate: "2/s"
        })
        expect(rated.status).toBe(200)
        expect((yield* flow.limits).find((l) => l.topic === "mail<x>")).toMatchObject({
          maxInFlight: 20,
          rate: { limit: 10, perMillis: 60_000, burst: 4 },
          groupRate: { limit: 2, perMillis: 1000, burst: 2 }
        })
        const ratedPage = (yield* get("/ops/durable/limits")).body
        expect(ratedPage).toContain(`<td class="rate">10/1m (burst 4)</td><td class="num tokens">4</td>`)
        expect(ratedPage).toContain(`name="rate" size="7" maxlength="32" placeholder="rate 10/1m" value="10/1m"`)
        for (const [field, value] of [["rate", "10/fortnight"], ["groupRate", "0/1m"], ["rate", "5"]] as const) {
          const refused = yield* limitAction("set", { topic: "mail<x>", maxInFlight: 20, [field]: value })
          expect([refused.status, JSON.parse(refused.body).error]).toEqual([400, expect.stringContaining(field)])
        }
        expect((yield* flow.limits).find((l) => l.topic === "mail<x>")!.rate).toEqual({
          limit: 10,
          perMillis: 60_000,
          burst: 4
        })
        expect(JSON.parse((yield* limitAction("clear", { topic: "mail<x>" })).body)).toEqual({
          topic: "mail<x>",
          changed: true
        })
        expect((yield* flow.limits).some((l) => l.topic === "mail<x>")).toBe(false)
      }))

    it.effect("inbox limits: set from the page (logged with who), listed escaped with what is in flight, refused when bad, cleared", () =>
      Effect.gen(function*() {
        expect((yield* get("/ops/durable/limits")).body).toContain("No inbox limits.")
        const set = yield* limitAction("inbox-set", { consumer: "bill<x>", maxInFlight: 3, rate: "10/1m", burst: 4 })
        expect([set.status, JSON.parse(set.body)]).toEqual([200, { consumer: "bill<x>", changed: true }])
        expect(logged).toContainEqual(
          expect.stringMatching(
            /^effect-durable admin: set limits of inbox consumer bill<x>: max 3, rate 10\/1m by fay from /
          )
        )
        const page = (yield* get("/ops/durable/limits")).body
        expect(page).toContain(`<tr data-consumer="bill&lt;x&gt;"><td>bill&lt;x&gt;</td><td class="num">0</td>`)
        expect(page).toContain(
          `<td class="num max">3</td><td class="rate">10/1m (burst 4)</td><td class="num tokens">4</td>`
        )
        expect(page).toContain(`data-action="inbox-limit-clear" data-consumer="bill&lt;x&gt;"`)
        const flow = yield* FlowControl.FlowControl
        expect((yield* flow.inboxLimits).find((l) => l.consumer === "bill<x>")).toMatchObject({
          maxInFlight: 3,
          rate: { limit: 10, perMillis: 60_000, burst: 4 },
          updatedBy: "fay (admin page)"
        })
        for (
          const [body, field] of [
            [{ consumer: "bill<x>", maxInFlight: 0 }, "maxInFlight"],
            [{ consumer: "bill<x>", rate: "10/fortnight" }, "rate"],
            [{ consumer: "bill<x>" }, "options"],
            [{ consumer: "", maxInFlight: 2 }, "consumer"]
          ] as const
        ) {
          const refused = yield* limitAction("inbox-set", body)
          expect([refused.status, JSON.parse(refused.body).error]).toEqual([400, expect.stringContaining(field)])
        }
        expect((yield* flow.inboxLimits).find((l) => l.consumer === "bill<x>")!.maxInFlight).toBe(3)
        expect(JSON.parse((yield* limitAction("inbox-clear", { consumer: "bill<x>" })).body)).toEqual({
          consumer: "bill<x>",
          changed: true
        })
        expect(yield* flow.inboxLimits).toEqual([])
      }))

    it.effect("a message still to be delivered has Cancel; cancelling it is logged, its page then offers Restore", () =>
      Effect.gen(function*() {
        const outbox = yield* Outbox.Outbox
        const id = yield* outbox.enqueue(freshTopic("page-cancel"), { n: 1 })
        expect((yield* get(`/ops/durable/messages/${id}`)).body).toContain(
          `data-action="cancel" data-scope="one" data-id="${id}"`
        )
        const cancelled = yield* get("/ops/durable/actions/cancel", {
          method: "POST",
          headers: { "content-type": "application/json", "x-test-user": "erin" },
          body: JSON.stringify({ ids: [id], reason: "withdrawn" })
        })
        expect(JSON.parse(cancelled.body)).toEqual({ ids: [id], interrupted: [] })
        expect(logged).toContainEqual(
          expect.stringMatching(
            new RegExp(`^effect-durable admin: cancel of 1 outbox message\\(s\\) ${id} by erin from `)
          )
        )
        const page = (yield* get(`/ops/durable/messages/${id}`)).body
        expect(page).toContain(`<span class="badge cancelled">cancelled</span>`)
        expect(page).toContain(`data-action="restore" data-scope="one" data-id="${id}"`)
        const restored = yield* get("/ops/durable/actions/restore", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ ids: [id] })
        })
        expect(JSON.parse(restored.body)).toEqual({ ids: [id] })
      }))

    it.effect("health: live always, ready only when the database answers and the schema is this release's", () =>
      Effect.gen(function*() {
        expect(yield* get("/ops/durable/health/live")).toEqual({ status: 200, body: "{\"status\":\"live\"}" })
        expect(JSON.parse((yield* get("/ops/durable/health/ready")).body)).toMatchObject({ status: "ready" })
        const behind = yield* get("/empty/health/ready")
        expect(behind.status).toBe(503)
        expect(JSON.parse(behind.body)).toEqual({
          status: "unavailable",
          reason: expect.stringMatching(/^schema at version 0, this release needs \d+$/)
        })
        const banner = yield* get("/empty/")
        expect(banner.body).toContain("Run effect-durable migrate")
      }))
  })
})
