// What an outside probe found in the admin page, each proven fixed over HTTP: who acts is
// recorded fitted to the library's 128 bytes (never a reason to refuse the action), and the
// Limits form is read by the rules `limits set` reads its flags with. Every refusal is a 400
// naming the field and its rule, and changes nothing.
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Schedules from "@effect-durable/pg/Schedules"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import { createServer } from "node:http"
import * as AdminPage from "../src/AdminPage.js"
import { cliOn, freshTopic, portOf, Substrate } from "./support.js"

// The operator's name comes as JSON text in a header (ASCII only, so any string, a lone surrogate too, can travel).
const Server = HttpRouter.serve(
  AdminPage.layer({
    mount: "/ops",
    operator: (request) => {
      const header = request.headers["x-operator-json"]
      return Effect.succeed(header === undefined ? undefined : JSON.parse(header) as string)
    }
  })
).pipe(Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" })))

const Live = Server.pipe(Layer.provideMerge(Substrate))

/** `name` as ASCII-only JSON text: every unit past ASCII (a lone surrogate too) as `\uXXXX`. */
const asciiJson = (name: string) =>
  JSON.stringify(name).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)

/** A same-origin JSON POST to the page, as `operator` when given. */
const post = (path: string, body: unknown, operator?: string) =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.promise(async () => {
      const response = await fetch(`http://127.0.0.1:${portOf(server)}/ops${path}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(operator === undefined ? {} : { "x-operator-json": asciiJson(operator) })
        },
        body: JSON.stringify(body)
      })
      return { status: response.status, body: JSON.parse(await response.text()) as Record<string, unknown> }
    }))

const get = (path: string) =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.promise(async () => {
      const response = await fetch(`http://127.0.0.1:${portOf(server)}/ops${path}`)
      return { status: response.status, body: await response.text() }
    }))

const utf8 = (text: string) => Buffer.byteLength(text, "utf8")
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

describe("hardening of the admin page", () => {
  it.layer(Live, { timeout: "180 seconds" })((it) => {
    it.effect("D16: pausing a topic from the page with an operator name over 128 bytes, or cut inside an emoji, succeeds and records the name cut to 128 bytes of whole characters", () =>
      Effect.gen(function*() {
        const admin = yield* OutboxAdmin.OutboxAdmin
        // 127 units then an emoji: a cut at 128 units leaves half of it, a lone surrogate.
        const emoji = `${"a".repeat(127)}\u{1F600}`
        // 100 characters, 200 bytes: a cut at 128 units keeps all of them.
        const accents = "\u00e9".repeat(100)
        for (
          const [name, recorded] of [
            [emoji, "a".repeat(127)],
            [accents, "\u00e9".repeat(64)],
            [`ops\u0000${"\u{1F600}".repeat(40)}`, `ops\ufffd${"\u{1F600}".repeat(30)}`],
            ["", "an operator"]
          ] as const
        ) {
          const topic = freshTopic("d16")
          const paused = yield* post("/actions/pause", { topic }, name)
          expect(paused, JSON.stringify(name)).toEqual({ status: 200, body: { topic, changed: true } })
          const by = (yield* admin.paused).find((p) => p.topic === topic)!.pausedBy!
          expect(by).toBe(recorded)
          expect(utf8(by)).toBeLessThanOrEqual(128)
          expect(LONE_SURROGATE.test(by)).toBe(false)
        }
        // The same name fitted the same way where the page records it with " (admin page)" after it, and on a schedule.
        const schedules = yield* Schedules.Schedules
        const schedule = freshTopic("d16-schedule")
        yield* schedules.define({ name: schedule, cron: "0 3 * * *", topic: "reports" })
        expect((yield* post("/schedules/actions/pause", { name: schedule }, emoji)).status).toBe(200)
        expect((yield* schedules.list).find((s) => s.name === schedule)!.pausedBy).toBe("a".repeat(127))
        const topic = freshTopic("d16-limit")
        expect((yield* post("/limits/actions/set", { topic, maxInFlight: 3 }, accents)).status).toBe(200)
        const limit = (yield* (yield* FlowControl.FlowControl).limits).find((l) => l.topic === topic)!
        expect(limit.updatedBy).toBe(`${"\u00e9".repeat(57)} (admin page)`)
        expect(utf8(limit.updatedBy)).toBeLessThanOrEqual(128)
      }))

    it.effect("H15: the page refuses a limit with every field blank and a burst without its rate (400 naming the field and the rule), as limits set does; nothing is set", () =>
      Effect.gen(function*() {
        const flow = yield* FlowControl.FlowControl
        const topic = freshTopic("h15")
        const blank = {
          topic,
          maxInFlight: null,
          groupMaxInFlight: null,
          rate: null,
          burst: null,
          groupRate: "  ",
          groupBurst: null
        }
        expect(yield* post("/limits/actions/set", blank)).toEqual({
          status: 400,
          body: {
            error:
              "invalid options: give maxInFlight, groupMaxInFlight, rate or groupRate (Clear removes a topic's limits)"
          }
        })
        expect(yield* post("/limits/actions/set", { topic, maxInFlight: 5, burst: 3 })).toEqual({
          status: 400,
          body: { error: "invalid burst: given only with rate (N/PERIOD, such as 10/1m, 5/s or 100/2h)" }
        })
        expect(yield* post("/limits/actions/set", { topic, rate: "10/1m", groupBurst: 3 })).toEqual({
          status: 400,
          body: { error: "invalid groupBurst: given only with groupRate (N/PERIOD, such as 10/1m, 5/s or 100/2h)" }
        })
        expect((yield* flow.limits).find((l) => l.topic === topic)).toBeUndefined()
        const consumer = freshTopic("h15-inbox")
        expect(yield* post("/limits/actions/inbox-set", { consumer, maxInFlight: 2, burst: 4 })).toEqual({
          status: 400,
          body: { error: "invalid burst: given only with rate (N/PERIOD, such as 10/1m, 5/s or 100/2h)" }
        })
        expect((yield* flow.inboxLimits).find((l) => l.consumer === consumer)).toBeUndefined()
        // The command refuses the same, by the same rules.
        const cli = yield* cliOn(["limits", "set", topic, "--max", "5", "--burst", "3"])
        expect([cli.code, cli.stderr.trim()]).toEqual([
          2,
          "effect-durable: invalid --burst: given only with --rate (N/PERIOD, such as 10/1m, 5/s or 100/2h)"
        ])
        // What the rules let through is set.
        expect((yield* post("/limits/actions/set", { ...blank, rate: "10/1m", burst: 3 })).status).toBe(200)
        expect((yield* flow.limits).find((l) => l.topic === topic)).toMatchObject({
          maxInFlight: null,
          rate: { limit: 10, perMillis: 60_000, burst: 3 }
        })
      }))

    it.effect("the page's attempts filter is a whole number of attempts: 0x10 or 1e1 is a 400 naming the field, not 16 or 10", () =>
      Effect.gen(function*() {
        for (const attempts of ["0x10", "1e1", "2.5", "-1"]) {
          const page = yield* get(`/messages?attempts=${encodeURIComponent(attempts)}`)
          expect(page.status, attempts).toBe(400)
          expect(page.body, attempts).toContain("filter.minAttempts")
        }
        expect((yield* get("/messages?attempts=2")).status).toBe(200)
      }))
  })
})
