// The admin page in a real headless Chromium (Debian's `chromium`, driven by playwright-core;
// nothing downloaded), mounted under prefixes of an application's own server with basic
// auth: a writable page at /ops/durable and a read-only one at /ro/durable. Every action is
// checked in the database; pause and resume against a running projector.
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as InboxWorker from "@effect-durable/pg/InboxWorker"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Schedules from "@effect-durable/pg/Schedules"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import { eventually } from "@effect-durable/testing/Eventually"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Ref from "effect/Ref"
import * as SqlClient from "effect/sql/SqlClient"
import { copyFileSync, existsSync, mkdirSync } from "node:fs"
import { createServer, request as httpRequest } from "node:http"
import { join } from "node:path"
import { type Browser as PlaywrightBrowser, chromium, type Page } from "playwright-core"
import * as AdminPage from "../src/AdminPage.js"
import { findBrowser } from "./setup/browser.js"
import { deadLetters, enqueue, freshTopic, PACKAGE, portOf, rowsOf, Substrate } from "./support.js"

const browser = findBrowser()
if (browser.path === undefined) {
  if (browser.required) throw new Error(`EFFECT_DURABLE_REQUIRE_BROWSER is set but ${browser.reason}`)
  console.warn(`Browser suite not run: ${browser.reason}`)
}

const USER = "ops"
const PASSWORD = "a-password-for-the-tests"
const auth = { basic: { user: USER, password: Redacted.make(PASSWORD) } }
const OUTPUT = join(PACKAGE, "build", "test-output")
const DOCS = join(PACKAGE, "..", "..", "docs")

/**
 * The application's server: the page mounted twice with credentials (writable, read-only),
 * once without (read-only, for another site's page to try), and a page of "another site"
 * (served as http://localhost:port, which is not the site http://127.0.0.1:port) that embeds it.
 */
/** What the server answered, and the `Sec-Fetch-*` headers the browser sent with it. */
const served: Array<
  {
    readonly url: string
    readonly status: number
    readonly site: string | undefined
    readonly mode: string | undefined
    readonly dest: string | undefined
  }
> = []
const Recorder = HttpRouter.middleware(
  (httpEffect) =>
    Effect.flatMap(
      HttpServerRequest.HttpServerRequest,
      (request) =>
        Effect.tap(httpEffect, (response) =>
          Effect.sync(() =>
            void served.push({
              url: request.url,
              status: response.status,
              site: request.headers["sec-fetch-site"],
              mode: request.headers["sec-fetch-mode"],
              dest: request.headers["sec-fetch-dest"]
            })
          ))
    ),
  { global: true }
)

const Server = HttpRouter.serve(Layer.mergeAll(
  Recorder,
  AdminPage.layer({ mount: "/ops/durable", auth, showPayloads: true, batchSize: 2 }),
  AdminPage.layer({ mount: "/ro/durable", auth, readOnly: true }),
  AdminPage.layer({ mount: "/open/durable", readOnly: true }),
  HttpRouter.add("GET", "/elsewhere", (request) => {
    const target = new URL(request.url, "http://x").searchParams.get("target") ?? ""
    return Effect.succeed(HttpServerResponse.text(
      `<!doctype html><html><body><img id="probe" src="${target}/open/durable/schema?drift=1&checks=1"><a id="link" href="${target}/open/durable/schema">the page</a></body></html>`,
      { contentType: "text/html; charset=utf-8" }
    ))
  })
)).pipe(Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })))

class Browser extends Context.Service<Browser, PlaywrightBrowser>()("test/Browser") {}

const BrowserLive = Layer.effect(
  Browser,
  Effect.acquireRelease(
    Effect.promise(() =>
      chromium.launch({
        executablePath: browser.path!,
        headless: true,
        args: [
          "--no-sandbox",
          "--disable-gpu",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync"
        ],
        timeout: 30_000
      })
    ),
    (b) => Effect.promise(() => b.close())
  )
)

const Live = Layer.mergeAll(Server, BrowserLive).pipe(Layer.provideMerge(Substrate))

const origin = Effect.map(HttpServer.HttpServer, (server) => `http://127.0.0.1:${portOf(server)}`)

/** A page signed in (or not), accepting every confirmation, closed after `use`. */
const withPage = <A>(
  use: (page: Page, base: string) => Promise<A>,
  options: { readonly signedIn?: boolean; readonly answer?: string } = {}
) =>
  Effect.gen(function*() {
    const b = yield* Browser
    const base = yield* origin
    return yield* Effect.promise(async () => {
      const context = await b.newContext({
        viewport: { width: 1280, height: 900 },
        ...(options.signedIn === false ? {} : { httpCredentials: { username: USER, password: PASSWORD } })
      })
      try {
        const page = await context.newPage()
        // Every confirm is accepted; a prompt gets `answer`.
        page.on("dialog", (dialog) => void dialog.accept(dialog.type() === "prompt" ? options.answer ?? "" : undefined))
        return await use(page, base)
      } finally {
        await context.close()
      }
    })
  })

const status = (page: Page, text: string | RegExp) =>
  page.locator("#status").filter({ hasText: text }).waitFor({ timeout: 10_000 })

/** A plain HTTP request (any header, even Host or Sec-Fetch-Site); status and body. */
const raw = (url: string, init: { method?: string; headers?: Record<string, string>; body?: string }) =>
  Effect.promise(() =>
    new Promise<{ status: number; body: string; headers: Record<string, string | string[] | undefined> }>(
      (resolve, reject) => {
        const req = httpRequest(url, { method: init.method ?? "GET", headers: init.headers ?? {} }, (res) => {
          let body = ""
          res.setEncoding("utf8").on("data", (chunk) => (body += chunk)).on(
            "end",
            () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers })
          )
        })
        req.on("error", reject)
        req.end(init.body)
      }
    )
  )
const basic = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString("base64")}`

/** Seeds what the overview shows: ready, dead and delivered messages, spread over the last minutes. */
const seedOverview = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const table = sql.literal((yield* DurableSettings).table("outbox_history"))
  const worker = yield* OutboxWorker.OutboxWorker
  for (const [topic, delivered] of [["orders", 240], ["invoices", 90], ["shipments", 40]] as const) {
    yield* enqueue(topic, delivered, (i) => ({ orderId: 1000 + i, customer: { id: i % 7 } }))
    const claimed = yield* worker.claim({ worker: "seed", topics: [topic], limit: 1000, lease: "1 minute" })
    yield* worker.markProjectedMany(claimed.map((m) => m.claim))
    // Deliveries over the last 14 minutes, with a lag that grows and falls.
    yield* sql`UPDATE ${table} SET projected_at = now() - make_interval(secs => (id % 28) * 30 + 5),
                                   available_at = now() - make_interval(secs => (id % 28) * 30 + 5 + (id % 28) % 9 * 0.4)
                WHERE topic = ${topic}`
  }
  yield* deadLetters("orders", 6, (id) => `payment provider timeout after ${id}ms`)
  yield* deadLetters("shipments", 2, () => "address rejected: postcode missing")
  yield* enqueue("orders", 37)
  yield* enqueue("invoices", 12)
  yield* sql`UPDATE ${table} SET dead_at = now() - make_interval(secs => (id % 20) * 30) WHERE dead_at IS NOT NULL`
  const inbox = yield* Inbox.Inbox
  for (const id of ["m-1", "m-2", "m-3"]) yield* inbox.handle("billing", id, Effect.void)
})

describe.skipIf(browser.path === undefined)("admin page in headless Chromium", () => {
  it.layer(Live, { timeout: "180 seconds" })((it) => {
    it.effect("the page loads behind basic auth and shows the seeded stats, a chart per topic, nothing from elsewhere", () =>
      Effect.gen(function*() {
        yield* seedOverview
        const seen = yield* withPage(async (page, base) => {
          const requests: Array<string> = []
          page.on("request", (request) => void requests.push(request.url()))
          const response = await page.goto(`${base}/ops/durable/`)
          const orders = page.locator("#topics tr[data-topic=orders]")
          await orders.waitFor()
          mkdirSync(OUTPUT, { recursive: true })
          const shot = join(OUTPUT, "admin-page.png")
          await page.screenshot({ path: shot, fullPage: true })
          return {
            status: response?.status(),
            title: await page.title(),
            orders: (await orders.locator("td").allInnerTexts()).slice(0, 5),
            charts: await page.locator("svg.chart").count(),
            bars: await page.locator("svg.chart rect.delivered").count(),
            groups: await page.locator("text=payment provider timeout").count(),
            offsite: requests.filter((url) => !url.startsWith(`${base}/ops/durable/`)),
            shot
          }
        })
        expect(seen.status).toBe(200)
        expect(seen.title).toBe("Overview · effect-durable")
        expect(seen.orders).toEqual(["orders", "37", "0", "0", "6"])
        expect(seen.charts).toBe(3)
        expect(seen.bars).toBeGreaterThan(20)
        expect(seen.groups).toBeGreaterThan(0)
        expect(seen.offsite).toEqual([])
        expect(existsSync(seen.shot)).toBe(true)
        // The README shows it: refreshed when asked, or when docs/ has none yet.
        if (process.env.EFFECT_DURABLE_UPDATE_DOCS === "1" || !existsSync(join(DOCS, "admin-page.png"))) {
          mkdirSync(DOCS, { recursive: true })
          copyFileSync(seen.shot, join(DOCS, "admin-page.png"))
        }
      }))

    it.effect("the message filter lives in the URL: a value inside the payload narrows the list", () =>
      Effect.gen(function*() {
        const topic = freshTopic("filter")
        yield* enqueue(topic, 6, (i) => ({ customer: { id: i % 3 } }))
        const seen = yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/messages?topic=${topic}`)
          await page.locator("input[name=payload]").fill("customer.id=2")
          await page.getByRole("button", { name: "Filter" }).click()
          await page.waitForURL(/payload=customer\.id%3D2/)
          return { url: page.url(), rows: await page.locator("#messages tbody tr").count() }
        })
        expect(seen.url).toContain(`topic=${topic}`)
        expect(seen.rows).toBe(2)
      }))

    it.effect("redrive of a selected dead letter moves it back to ready (checked in the database)", () =>
      Effect.gen(function*() {
        const topic = freshTopic("redrive")
        const ids = yield* deadLetters(topic, 2)
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/messages?topic=${topic}&state=dead`)
          await page.locator(`tr[data-row-id="${ids[0]}"] input[name=select]`).check()
          await page.getByRole("button", { name: "Redrive selected" }).click()
          await status(page, "redriven 1")
          await page.locator(`tr[data-row-id="${ids[0]}"] .state`).filter({ hasText: "ready" }).waitFor()
        })
        expect((yield* rowsOf(topic)).map((r) => [r.id, r.dead, r.attempts])).toEqual([[ids[0], false, 0], [
          ids[1],
          true,
          1
        ]])
      }))

    it.effect("a message's page shows each failed delivery's error; discard from it deletes the message (checked in the database)", () =>
      Effect.gen(function*() {
        const topic = freshTopic("discard")
        const ids = yield* deadLetters(topic, 2)
        let failures = ""
        const payload = yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/messages/${ids[1]}`)
          const shown = await page.locator("#payload").innerText()
          failures = await page.locator("#failures").innerText()
          await page.getByRole("button", { name: "Discard" }).click()
          await status(page, "discarded 1")
          return shown
        })
        expect(JSON.parse(payload)).toEqual({ n: 1 })
        // Each failed delivery's error is on the message's page.
        expect(failures).toContain(`order ${ids[1]} not found`)
        expect(failures).toContain("test")
        expect((yield* rowsOf(topic)).map((r) => r.id)).toEqual([ids[0]])
      }))

    it.effect("redrive of a whole error group: the count is confirmed, batches run on the server, progress is shown", () =>
      Effect.gen(function*() {
        const topic = freshTopic("group")
        yield* deadLetters(topic, 5, () => "schema mismatch in v2")
        yield* deadLetters(topic, 1, () => "something else")
        const confirmed = yield* withPage(async (page, base) => {
          const questions: Array<string> = []
          page.on("dialog", (dialog) => void questions.push(dialog.message()))
          await page.goto(`${base}/ops/durable/dead-letters?topic=${topic}`)
          await page.locator("#groups tr", { hasText: "schema mismatch in v2" }).getByRole("button", {
            name: "Redrive"
          }).click()
          await status(page, /redriven 5 of 5 \(done\)/)
          return questions
        })
        expect(confirmed).toEqual(["Redrive all 5 dead messages matching this filter?"])
        const rows = yield* rowsOf(topic)
        expect(rows.filter((r) => !r.dead)).toHaveLength(5)
        expect(rows.filter((r) => r.dead)).toHaveLength(1)
      }))

    it.effect(
      "a message waiting for its retry is retried now from its page; one that blocks its key is moved aside with a reason; a permanent failure says so (checked in the database)",
      () =>
        Effect.gen(function*() {
          const topic = freshTopic("hurry")
          const [waiting, blocking] = yield* enqueue(topic, 2)
          const worker = yield* OutboxWorker.OutboxWorker
          const claimed = yield* worker.claim({ worker: "w", topics: [topic], limit: 10, lease: "1 minute" })
          for (const m of claimed) {
            yield* worker.release(m.claim, { error: "the service is down", retryDelay: "1 hour" })
          }
          const [dead] = yield* deadLetters(topic, 1, () => "order 7 does not exist")
          const seen = yield* withPage(async (page, base) => {
            await page.goto(`${base}/ops/durable/messages/${waiting}`)
            await page.getByRole("button", { name: "Retry now" }).click()
            await status(page, "retried now 1")
            await page.goto(`${base}/ops/durable/messages/${blocking}`)
            await page.getByRole("button", { name: "Move aside" }).click()
            await status(page, "moved aside 1")
            await page.goto(`${base}/ops/durable/messages/${dead}`)
            const attempts = await page.locator("dt:has-text('Attempts') + dd").innerText()
            const actions = await page.locator(".actions button").allInnerTexts()
            return { attempts, actions }
          }, { answer: "blocks the customer's orders" })
          expect(seen.attempts).toBe("1: a permanent failure (never retried), 0 leases ran out")
          expect(seen.actions).toEqual(["Redrive", "Discard"])
          const sql = yield* SqlClient.SqlClient
          const messages = sql.literal((yield* DurableSettings).table("outbox_messages"))
          const rows = yield* sql<{ id: string; due: boolean; dead: boolean; attempts: number; last_error: string }>`
            SELECT id::text, available_at <= now() AS due, dead_at IS NOT NULL AS dead, attempt_count AS attempts,
                   last_error FROM ${messages} WHERE id = ANY(${[waiting!, blocking!]}::bigint[]) ORDER BY id`
          expect(rows[0]).toMatchObject({ due: true, dead: false, attempts: 1 })
          expect(rows[1]).toMatchObject({ dead: true })
          expect(rows[1]!.last_error).toBe(
            `the service is down; dead: moved aside by ${USER} (admin page): blocks the customer's orders`
          )
        })
    )

    it.effect("the dead letters' group row shows its group key, and the key typed as shown into the filter finds the group", () =>
      Effect.gen(function*() {
        const topic = freshTopic("groups")
        yield* deadLetters(topic, 3, (id) => `payment ${id} declined`)
        const seen = yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/dead-letters?topic=${topic}`)
          const key = await page.locator("#groups code.group").innerText()
          await page.goto(`${base}/ops/durable/messages?topic=${topic}&error=${encodeURIComponent(key)}`)
          const rows = await page.locator("#messages tbody tr").count()
          // A raw error as a message shows it, and the start of one, find it too.
          await page.goto(`${base}/ops/durable/messages?topic=${topic}&error=${encodeURIComponent("payment 123 decl")}`)
          return { key, rows, byPrefix: await page.locator("#messages tbody tr").count() }
        })
        expect(seen).toEqual({ key: "payment # declined (dead: a permanent failure)", rows: 3, byPrefix: 3 })
      }))

    it.effect("an inbox entry waiting for its retry is retried now from the inbox page (checked in the database)", () =>
      Effect.gen(function*() {
        const consumer = freshTopic("inbox-hurry")
        const inbox = yield* Inbox.Inbox
        yield* inbox.receive(consumer, "m-1", {})
        const worker = yield* InboxWorker.InboxWorker
        const [entry] = yield* worker.claim({ consumer, worker: "w", limit: 1, lease: "1 minute" })
        yield* worker.release(entry!.claim, { error: "down", retryDelay: "1 hour" })
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/inbox?consumer=${consumer}`)
          await page.locator(`#receipts tr[data-row-id="${entry!.id}"]`).getByRole("button", { name: "Retry now" })
            .click()
          await status(page, "retried now 1")
        })
        const sql = yield* SqlClient.SqlClient
        const table = sql.literal((yield* DurableSettings).table("inbox"))
        const [row] = yield* sql<{ due: boolean }>`SELECT available_at <= now() AS due FROM ${table} WHERE id = ${
          entry!.id
        }`
        expect(row).toEqual({ due: true })
      }))

    it.effect("workflows: the list links to an execution with its journal; Interrupt and Resume act on it (checked in the database), the read-only page has neither", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const workflow = freshTopic("Billing/<b>")
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status, result)
                   VALUES (${workflow}, 'inv 7/a', '{"invoice":7}', 'f', 'suspended', '{"_tag":"Suspended"}'),
                          (${workflow}, 'inv-8', '{"invoice":8}', 'f', 'running', NULL)`
        // 'inv 7/a' waits on its child 'inv-8' (as its run's settle records it).
        yield* sql`UPDATE durable.workflow_executions
                      SET waiting_on = jsonb_build_array(jsonb_build_object('kind', 'child', 'workflow', ${workflow}::text,
                                                                            'executionId', 'inv-8'))
                    WHERE workflow = ${workflow} AND execution_id = 'inv 7/a'`
        yield* sql`INSERT INTO durable.workflow_steps (workflow, execution_id, kind, name, attempt, result)
                   VALUES (${workflow}, 'inv 7/a', 'activity', 'charge', 1,
                           '{"_tag":"Complete","exit":{"_tag":"Success","value":"ch_42"}}')`
        const seen = yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/workflows?workflow=${encodeURIComponent(workflow)}`)
          const listed = await page.locator("#executions tbody tr").count()
          await page.getByRole("link", { name: "inv-8" }).click()
          await page.getByRole("button", { name: "Interrupt" }).click()
          await status(page, "interrupt requested for")
          await page.goto(`${base}/ops/durable/workflows?workflow=${encodeURIComponent(workflow)}&status=suspended`)
          const waitsCell = await page.locator("#executions tbody td.waits").innerText()
          await page.getByRole("link", { name: "inv 7/a" }).click()
          const heading = await page.locator("h1").innerText()
          const journal = await page.locator("#journal tbody").innerText()
          await page.getByRole("button", { name: "Resume" }).click()
          await status(page, "resumed")
          // The child it waits on is a link to the child's page.
          await page.locator("ul.waits").getByRole("link").click()
          const childHeading = await page.locator("h1").innerText()
          await page.goto(`${base}/ro/durable/workflows/${encodeURIComponent(workflow)}/inv-8`)
          const readOnlyButtons = await page.locator("button[data-action]").count()
          return { listed, heading, journal, readOnlyButtons, waitsCell, childHeading }
        })
        expect(seen.listed).toBe(2)
        expect(seen.waitsCell).toBe(`child ${workflow} inv-8`)
        expect(seen.childHeading).toContain(`${workflow} inv-8`)
        expect(seen.heading).toContain(`${workflow} inv 7/a`)
        expect(seen.journal).toMatch(/activity\s+charge\s+1\s+success/)
        expect(seen.journal).toContain("ch_42") // this page shows payloads
        expect(seen.readOnlyButtons).toBe(0)
        const rows = yield* sql<{ execution_id: string; status: string; interrupt_requested: boolean }>`
          SELECT execution_id, status, interrupt_requested FROM durable.workflow_executions
           WHERE workflow = ${workflow} ORDER BY execution_id`
        expect(rows).toEqual([
          { execution_id: "inv 7/a", status: "pending", interrupt_requested: false },
          { execution_id: "inv-8", status: "running", interrupt_requested: true }
        ])
        const runs = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.outbox_messages
                                                WHERE topic = ${"workflow.run:" + workflow}`
        expect(runs[0]!.n).toBe(1) // the resumed execution's run (the running one gets its interrupt on its next run)
      }))

    it.effect("schedules: Pause and Resume from the page act on the schedule (checked in the database)", () =>
      Effect.gen(function*() {
        const schedules = yield* Schedules.Schedules
        const name = freshTopic("nightly")
        yield* schedules.define({ name, cron: "0 3 * * *", topic: "reports" })
        const stateOf = Effect.map(schedules.list, (all) => all.find((s) => s.name === name)!.paused)
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/schedules`)
          await page.locator(`tr[data-schedule="${name}"]`).getByRole("button", { name: "Pause" }).click()
          await status(page, `paused schedule ${name}`)
        })
        expect(yield* stateOf).toBe(true)
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/schedules`)
          await page.locator(`tr[data-schedule="${name}"]`).getByRole("button", { name: "Resume" }).click()
          await status(page, `resumed schedule ${name}`)
        })
        expect(yield* stateOf).toBe(false)
      }))

    it.effect("limits: a new limit set from the form, changed in its row, cleared (checked in the database)", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const topic = freshTopic("mail")
        const limitOf = Effect.map(flow.limits, (all) => all.find((l) => l.topic === topic))
        const submitted = (page: Page, action: string, click: () => Promise<void>) =>
          Promise.all([page.waitForResponse((r) => r.url().endsWith(`/limits/actions/${action}`)), click()])
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/limits`)
          const form = page.locator("#new-limit")
          await form.locator("input[name=topic]").fill(topic)
          await form.locator("input[name=max]").fill("20")
          await form.locator("input[name=group-max]").fill("2")
          await form.locator("input[name=rate]").fill("30/1m")
          await form.locator("input[name=burst]").fill("5")
          await submitted(page, "set", () => form.getByRole("button", { name: "Set" }).click())
        })
        expect(yield* limitOf).toMatchObject({
          maxInFlight: 20,
          groupMaxInFlight: 2,
          rate: { limit: 30, perMillis: 60_000, burst: 5 },
          groupRate: null
        })
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/limits`)
          const row = page.locator(`tr[data-topic="${topic}"]`)
          await row.locator("input[name=max]").fill("5")
          await row.locator("input[name=group-max]").fill("")
          await submitted(page, "set", () => row.getByRole("button", { name: "Set" }).click())
        })
        // The row's other fields came filled with what is set: changing one keeps the rest (the rate too).
        expect(yield* limitOf).toMatchObject({
          maxInFlight: 5,
          groupMaxInFlight: null,
          rate: { limit: 30, perMillis: 60_000, burst: 5 }
        })
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/limits`)
          const row = page.locator(`tr[data-topic="${topic}"]`)
          await submitted(page, "clear", () => row.getByRole("button", { name: "Clear" }).click())
        })
        expect(yield* limitOf).toBeUndefined()
      }))

    it.effect("inbox limits: a consumer's limit set from the form, changed in its row, cleared (checked in the database)", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const consumer = freshTopic("invoicing")
        const limitOf = Effect.map(flow.inboxLimits, (all) => all.find((l) => l.consumer === consumer))
        const submitted = (page: Page, action: string, click: () => Promise<void>) =>
          Promise.all([page.waitForResponse((r) => r.url().endsWith(`/limits/actions/${action}`)), click()])
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/limits`)
          const form = page.locator("#new-inbox-limit")
          await form.locator("input[name=consumer]").fill(consumer)
          await form.locator("input[name=max]").fill("4")
          await form.locator("input[name=rate]").fill("10/1s")
          await submitted(page, "inbox-set", () => form.getByRole("button", { name: "Set" }).click())
        })
        expect(yield* limitOf).toMatchObject({ maxInFlight: 4, rate: { limit: 10, perMillis: 1000, burst: 10 } })
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/limits`)
          const row = page.locator(`tr[data-consumer="${consumer}"]`)
          await row.locator("input[name=max]").fill("")
          await submitted(page, "inbox-set", () => row.getByRole("button", { name: "Set" }).click())
        })
        expect(yield* limitOf).toMatchObject({ maxInFlight: null, rate: { limit: 10, perMillis: 1000, burst: 10 } })
        yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/limits`)
          const row = page.locator(`tr[data-consumer="${consumer}"]`)
          await submitted(page, "inbox-clear", () => row.getByRole("button", { name: "Clear" }).click())
        })
        expect(yield* limitOf).toBeUndefined()
      }))

    it.effect("pause stops a topic's deliveries by a running projector, other topics flow on; resume restarts them", () =>
      Effect.gen(function*() {
        const paused = freshTopic("paused")
        const other = freshTopic("other")
        const delivered = yield* Ref.make<ReadonlyArray<string>>([])
        const projector = Projector.layer({ topics: [paused, other], pollInterval: "100 millis" }).pipe(
          Layer.provide(Publisher.layerHandler((message) => Ref.update(delivered, (ids) => [...ids, message.topic])))
        )
        yield* Effect.gen(function*() {
          const [first] = yield* enqueue(paused, 1)
          yield* eventually(Ref.get(delivered), (topics) => topics.includes(paused))
          yield* withPage(async (page, base) => {
            await page.goto(`${base}/ops/durable/`)
            await page.locator(`tr[data-topic="${paused}"] button[data-action=pause]`).click()
            await status(page, `paused ${paused}`)
            await page.locator(`tr[data-topic="${paused}"] .topic-state`).filter({ hasText: "paused" }).waitFor()
          })
          const [held] = yield* enqueue(paused, 1)
          yield* enqueue(other, 1)
          yield* eventually(Ref.get(delivered), (topics) => topics.includes(other))
          // `other` was enqueued after `held`: the claim that took it saw `held` and passed it by.
          // Never claimed (no attempt) is the proof, with no wait for something not to happen.
          expect((yield* Ref.get(delivered)).filter((t) => t === paused)).toHaveLength(1)
          expect((yield* rowsOf(paused)).map((r) => [r.id, r.projected, r.attempts])).toEqual([[first, true, 1], [
            held,
            false,
            0
          ]])
          yield* withPage(async (page, base) => {
            await page.goto(`${base}/ops/durable/`)
            await page.locator(`tr[data-topic="${paused}"] button[data-action=resume]`).click()
            await status(page, `resumed ${paused}`)
          })
          yield* eventually(Ref.get(delivered), (topics) => topics.filter((t) => t === paused).length === 2, 10)
          // The handler saw it; its mark commits after the handler returns (on a loaded machine,
          // later): wait for the mark, not for the handler.
          yield* eventually(rowsOf(paused), (rows) => rows.length === 2 && rows.every((r) => r.projected), 10)
        }).pipe(Effect.provide(projector), Effect.scoped)
      }))

    it.effect("without credentials the page answers 401 and asks for them", () =>
      Effect.gen(function*() {
        // Chromium ends the navigation (no credentials to offer); the response it got says why.
        const code = yield* withPage(async (page, base) => {
          const answered = page.waitForResponse(`${base}/ops/durable/`)
          await page.goto(`${base}/ops/durable/`).catch(() => undefined)
          return (await answered).status()
        }, { signedIn: false })
        expect(code).toBe(401)
        const base = yield* origin
        const response = yield* raw(`${base}/ops/durable/actions/pause`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ topic: "orders" })
        })
        expect(response.status).toBe(401)
        expect(response.headers["www-authenticate"]).toBe("Basic realm=\"effect-durable\", charset=\"UTF-8\"")
      }))

    it.effect("a read-only page shows no action and answers a write with 403, from the browser too", () =>
      Effect.gen(function*() {
        const topic = freshTopic("readonly")
        yield* deadLetters(topic, 1)
        const seen = yield* withPage(async (page, base) => {
          await page.goto(`${base}/ro/durable/messages?topic=${topic}`)
          const buttons = await page.locator("button[data-action]").count()
          const write = await page.evaluate(async (url) => {
            const response = await fetch(url, {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ ids: ["1"] })
            })
            return { status: response.status, body: await response.json() }
          }, `${base}/ro/durable/actions/discard`)
          return { buttons, write }
        })
        expect(seen.buttons).toBe(0)
        expect(seen.write).toEqual({ status: 403, body: { error: "the admin page is read-only" } })
        const base = yield* origin
        const put = yield* raw(`${base}/ro/durable/messages`, { method: "DELETE", headers: { authorization: basic } })
        expect(put.status).toBe(403)
        expect((yield* rowsOf(topic))[0]!.dead).toBe(true)
      }))

    it.effect("bidi controls and escape characters in stored values are marked where they are shown; actions still get the value as it is", () =>
      Effect.gen(function*() {
        const topic = `${freshTopic("bidi")}\u202egnp.exe\u001b[2J`
        yield* deadLetters(topic, 1, () => "refund \u202e0001$\u202c to \u2066x\u2069")
        const seen = yield* withPage(async (page, base) => {
          await page.goto(`${base}/ops/durable/messages?topic=${encodeURIComponent(topic)}`)
          await page.locator("#messages tbody tr").waitFor()
          // In the page (no DOM types here): the row's marks and cells as shown.
          const list = await page.evaluate(() => {
            const row = (globalThis as any).document.querySelector("#messages tbody tr")
            return {
              marks: Array.from(row.querySelectorAll("mark.control"), (m: any) => m.textContent as string),
              topic: row.cells[2].innerText as string,
              error: row.cells[7].innerText as string
            }
          })
          await page.goto(`${base}/ops/durable/`)
          const found = await page.waitForFunction((t) => {
            const rows: Array<any> = Array.from((globalThis as any).document.querySelectorAll("#topics tr[data-topic]"))
            const row = rows.find((r) => r.dataset.topic === t)
            return row === undefined
              ? undefined
              : { marks: Array.from(row.querySelectorAll("mark.control"), (m: any) => m.textContent as string) }
          }, topic)
          const overview = (await found.jsonValue()) as { marks: ReadonlyArray<string> }
          await page.evaluate((t) => {
            const rows: Array<any> = Array.from((globalThis as any).document.querySelectorAll("#topics tr[data-topic]"))
            rows.find((r) => r.dataset.topic === t).querySelector("button[data-action=pause]").click()
          }, topic)
          await status(page, "paused")
          return { list, overview }
        })
        expect(seen.list.marks).toEqual(["U+202E", "U+001B", "U+202E", "U+202C", "U+2066", "U+2069"])
        expect(seen.list.topic).toContain("U+202Egnp.exeU+001B[2J")
        expect(seen.list.error).toContain("refund U+202E0001$U+202C to U+2066xU+2069")
        expect(seen.overview.marks).toEqual(["U+202E", "U+001B"])
        // The button sent the topic as stored, not as shown.
        const paused = yield* Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.paused)
        expect(paused.some((p) => p.topic === topic)).toBe(true)
      }))

    it.effect("H18: confirm dialogs show stored names (topic, schedule, workflow and execution, a limit's topic and consumer) with each control character marked by its code point; the status line marks them as the page does", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const flow = yield* FlowControl.FlowControl
        const evil = "\u202egnp.exe\u001b[2J\nOK?"
        const topic = `${freshTopic("h18")}${evil}`
        const schedule = `${freshTopic("h18-schedule")}${evil}`
        const consumer = `${freshTopic("h18-consumer")}${evil}`
        const workflow = `${freshTopic("h18-workflow")}\u2066`
        const execution = "run\u202e1\u2069"
        yield* enqueue(topic, 1)
        yield* (yield* Schedules.Schedules).define({ name: schedule, cron: "0 3 * * *", topic: "reports" })
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status)
                   VALUES (${workflow}, ${execution}, '{}', 'f', 'running')`
        yield* flow.setLimit(topic, { maxInFlight: 3 })
        yield* flow.setInboxLimit(consumer, { maxInFlight: 3 })
        const click = (page: Page, selector: string) =>
          page.evaluate(([row, attribute, value, button]) => {
            const rows: Array<any> = Array.from((globalThis as any).document.querySelectorAll(row))
            rows.find((r) => r.getAttribute(attribute) === value).querySelector(button).click()
          }, selector.split("|") as [string, string, string, string])
        const seen = yield* withPage(async (page, base) => {
          const questions: Array<string> = []
          page.on("dialog", (dialog) => void questions.push(dialog.message()))
          await page.goto(`${base}/ops/durable/`)
          await page.waitForFunction(
            (t) =>
              Array.from((globalThis as any).document.querySelectorAll("#topics tr[data-topic]")).some((r: any) =>
                r.dataset.topic === t
              ),
            topic
          )
          await click(page, `#topics tr[data-topic]|data-topic|${topic}|button[data-action=pause]`)
          await status(page, "paused")
          const marks = await page.locator("#status mark.control").allInnerTexts()
          await page.goto(`${base}/ops/durable/schedules`)
          await click(page, `#schedules tr[data-schedule]|data-schedule|${schedule}|button[data-action=schedule-pause]`)
          await status(page, "paused schedule")
          await page.goto(
            `${base}/ops/durable/workflows/${encodeURIComponent(workflow)}/${encodeURIComponent(execution)}`
          )
          await page.getByRole("button", { name: "Interrupt" }).click()
          await status(page, "interrupt requested for")
          await page.goto(`${base}/ops/durable/limits`)
          // A cleared limit reloads the page: the next navigation waits for that reload's load
          // (a goto racing it was aborted, net::ERR_ABORTED).
          await Promise.all([
            page.waitForEvent("load"),
            page.waitForResponse((r) => r.url().endsWith("/limits/actions/clear")),
            click(page, `#limits tr[data-topic]|data-topic|${topic}|button[data-action=limit-clear]`)
          ])
          await page.goto(`${base}/ops/durable/limits`)
          await Promise.all([
            page.waitForEvent("load"),
            page.waitForResponse((r) => r.url().endsWith("/limits/actions/inbox-clear")),
            click(
              page,
              `#inbox-limits tr[data-consumer]|data-consumer|${consumer}|button[data-action=inbox-limit-clear]`
            )
          ])
          return { questions, marks }
        })
        const marked = (text: string) =>
          text.replace(
            /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g,
            (c) => `[U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}]`
          )
        expect(marked(topic)).toContain("[U+202E]gnp.exe[U+001B][2J[U+000A]OK?")
        expect(seen.questions).toEqual([
          `Pause topic ${marked(topic)}?`,
          `Pause schedule ${marked(schedule)}? Its slots are missed until it is resumed.`,
          `Interrupt ${marked(workflow)} execution ${
            marked(execution)
          }? Its compensations run and it ends interrupted.`,
          `Clear every limit of topic ${marked(topic)}?`,
          `Clear the limits of inbox consumer ${marked(consumer)}?`
        ])
        expect(seen.marks).toEqual(["U+202E", "U+001B", "U+000A"])
        // The actions got the names as stored.
        expect((yield* Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.paused)).some((p) => p.topic === topic))
          .toBe(true)
        expect((yield* (yield* Schedules.Schedules).list).find((x) => x.name === schedule)!.paused).toBe(true)
        expect((yield* flow.limits).some((l) => l.topic === topic)).toBe(false)
        expect((yield* flow.inboxLimits).some((l) => l.consumer === consumer)).toBe(false)
        const [row] = yield* sql<{ interrupt_requested: boolean }>`
          SELECT interrupt_requested FROM durable.workflow_executions WHERE workflow = ${workflow}`
        expect(row!.interrupt_requested).toBe(true)
      }))

    it.effect("another site's <img> of the page is refused (403) in Chromium, a link followed to it is served, and drift is an action", () =>
      Effect.gen(function*() {
        const seen = yield* withPage(async (page, base) => {
          const elsewhere = base.replace("127.0.0.1", "localhost")
          // Another site's page (localhost is not the site 127.0.0.1) with an <img> of the page.
          await page.goto(`${elsewhere}/elsewhere?target=${encodeURIComponent(base)}`)
          await page.evaluate(async (url) => {
            await fetch(url, { mode: "no-cors", credentials: "include" }).catch(() => undefined)
          }, `${base}/open/durable/messages`)
          await page.click("#link")
          await page.waitForURL(`${base}/open/durable/schema`)
          const readOnlyButtons = await page.locator("button[data-action=drift]").count()
          await page.goto(`${base}/ops/durable/schema`)
          await page.getByRole("button", { name: "Compare with the migrations" }).click()
          const drift = await page.locator("#drift").innerText()
          return { readOnlyButtons, drift }
        })
        const answered = (url: string) =>
          served.filter((s) => s.url === url).map(({ dest, mode, site, status }) => ({ status, site, mode, dest }))
        // What Chromium sent for each, and what the page answered.
        expect(answered("/open/durable/schema?drift=1&checks=1")).toEqual([{
          status: 403,
          site: "cross-site",
          mode: "no-cors",
          dest: "image"
        }])
        expect(answered("/open/durable/messages")).toEqual([{
          status: 403,
          site: "cross-site",
          mode: "no-cors",
          dest: "empty"
        }])
        expect(answered("/open/durable/schema")).toEqual([{
          status: 200,
          site: "cross-site",
          mode: "navigate",
          dest: "document"
        }])
        expect(seen.readOnlyButtons).toBe(0)
        expect(seen.drift).toBe("No drift: the schema is what the migrations build.")
      }))

    it.effect("a cross-site write is refused (Sec-Fetch-Site, Origin) even with credentials, and nothing changes", () =>
      Effect.gen(function*() {
        const topic = freshTopic("csrf")
        const [id] = yield* deadLetters(topic, 1)
        const base = yield* origin
        const post = (headers: Record<string, string>) =>
          raw(`${base}/ops/durable/actions/discard`, {
            method: "POST",
            headers: { authorization: basic, "content-type": "application/json", ...headers },
            body: JSON.stringify({ ids: [id] })
          })
        expect((yield* post({ "sec-fetch-site": "cross-site" })).status).toBe(403)
        expect((yield* post({ origin: "http://attacker.example" })).status).toBe(403)
        expect(
          (yield* raw(`${base}/ops/durable/actions/discard`, {
            method: "POST",
            headers: { authorization: basic, "content-type": "text/plain" },
            body: JSON.stringify({ ids: [id] })
          })).status
        ).toBe(415)
        expect(yield* rowsOf(topic)).toHaveLength(1)
        const consumers = yield* Effect.flatMap(InboxAdmin.InboxAdmin, (admin) => admin.stats)
        expect(consumers.find((c) => c.consumer === "billing")).toMatchObject({ processed: 3 })
      }))
  })
})
