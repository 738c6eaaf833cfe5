// The read commands (status, dead-letters list and show, explain, ledger show) and pause /
// resume, run as the built binary on rows the substrate made: text for people, --json parsed.
import * as Fingerprint from "@effect-durable/core/Fingerprint"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { cliOn, deadLetters, enqueue, freshTopic, json, Substrate } from "./support.js"

describe("effect-durable read commands", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("status counts per topic and per inbox consumer; --json parses; paused topics are marked", () =>
      Effect.gen(function*() {
        const topic = freshTopic("status")
        yield* enqueue(topic, 3)
        yield* deadLetters(`${topic}-bad`, 2)
        const inbox = yield* Inbox.Inbox
        yield* inbox.receive("billing", "m-1", { n: 1 }, {})
        yield* Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.pause(`${topic}-bad`, { by: "test" }))
        const result = yield* cliOn(["status", "--json"])
        expect(result.code).toBe(0)
        const status = json(result)
        expect(status.schema).toBe("durable")
        expect(status.topics).toEqual(expect.arrayContaining([
          expect.objectContaining({ topic, ready: 3, dead: 0, paused: false }),
          expect.objectContaining({ topic: `${topic}-bad`, ready: 0, dead: 2, paused: true })
        ]))
        expect(status.consumers).toEqual([expect.objectContaining({ consumer: "billing", ready: 1 })])
        const text = yield* cliOn(["status"])
        // READY DELAYED CLAIMED DEAD CANCELLED PROJECTED OLDEST READY
        expect(text.stdout).toMatch(new RegExp(`${topic}\\s+3\\s+0\\s+0\\s+0\\s+0\\s+0\\s+\\S+`))
        expect(text.stdout).toMatch(new RegExp(`${topic}-bad\\s+0\\s+0\\s+0\\s+2\\s+0\\s+0\\s+-\\s+paused`))
        expect(text.stdout).toMatch(/billing\s+1\s+0\s+0\s+0\s+0\s+0/)
      }))

    it.effect("status --watch refreshes until Ctrl-C and then exits 130", () =>
      Effect.gen(function*() {
        let sent = false
        const result = yield* cliOn(["status", "--watch", "--interval", "200ms", "--json"], {
          onStdout: (stdout, child) => {
            if (!sent && stdout.split("\n").filter((l) => l.startsWith("{")).length >= 2) {
              sent = true
              child.kill("SIGINT")
            }
          }
        })
        expect(result.code).toBe(130)
        const lines = result.stdout.trim().split("\n")
        expect(lines.length).toBeGreaterThanOrEqual(2)
        for (const line of lines) expect(JSON.parse(line)).toHaveProperty("topics")
      }))

    it.effect("dead-letters list filters by topic, id, age and error group; --json pages with next", () =>
      Effect.gen(function*() {
        const topic = freshTopic("list")
        const ids = yield* deadLetters(topic, 3, (id) => (id.endsWith("0") ? "timeout" : `order ${id} not found`))
        const all = yield* cliOn(["dead-letters", "list", "--topic", topic, "--json"])
        expect(all.code).toBe(0)
        expect(json(all).items.map((m: { id: string }) => m.id)).toEqual([...ids].reverse())
        const page = yield* cliOn(["dead-letters", "list", "--topic", topic, "--limit", "2", "--json"])
        expect(json(page).next).toBe(ids[1])
        const one = yield* cliOn(["dead-letters", "list", "--id", ids[0]!, "--json"])
        expect(json(one).items.map((m: { id: string }) => m.id)).toEqual([ids[0]])
        const group = yield* cliOn([
          "dead-letters",
          "list",
          "--topic",
          topic,
          "--error",
          "order # not found (dead: a permanent failure)",
          "--json"
        ])
        expect(json(group).items.map((m: { id: string }) => m.id)).toEqual(
          ids.filter((id) => !id.endsWith("0")).reverse()
        )
        const old = yield* cliOn(["dead-letters", "list", "--topic", topic, "--older-than", "1h", "--json"])
        expect(json(old).items).toEqual([])
        const text = yield* cliOn(["dead-letters", "list", "--topic", topic, "--limit", "2"])
        expect(text.stdout).toMatch(/^ID\s+TOPIC\s+ATTEMPTS\s+DEAD AT\s+LAST ERROR$/m)
        expect(text.stderr).toContain(`more: --before ${ids[1]}`)
        const none = yield* cliOn(["dead-letters", "list", "--topic", `${topic}-none`])
        expect(none.stdout.trim()).toBe(`no dead letters (topic ${topic}-none)`)
      }))

    it.effect("dead-letters show prints one message in full, each failed delivery's error included; an unknown id exits 1", () =>
      Effect.gen(function*() {
        const topic = freshTopic("show")
        const [id] = yield* deadLetters(topic, 1)
        const shown = yield* cliOn(["dead-letters", "show", id!, "--json"])
        expect(shown.code).toBe(0)
        expect(json(shown)).toMatchObject({
          id,
          topic,
          state: "dead",
          payload: { n: 0 },
          claimedBy: "test",
          attempts: 1,
          failureHistory: [{ attempt: 1, worker: "test", error: `order ${id} not found` }]
        })
        const text = yield* cliOn(["dead-letters", "show", id!])
        expect(text.stdout).toMatch(/^state:\s+dead$/m)
        expect(text.stdout).toMatch(/^lease holder:\s+test \(generation 1\)$/m)
        expect(text.stdout).toMatch(new RegExp(`^  attempt 1  \\d{4}-\\S+Z  test  order ${id} not found$`, "m"))
        const missing = yield* cliOn(["dead-letters", "show", "987654321"])
        expect(missing).toMatchObject({ code: 1, stdout: "" })
        expect(missing.stderr.trim()).toBe("effect-durable: no outbox message 987654321")
        const bad = yield* cliOn(["dead-letters", "show", "abc"])
        expect(bad.code).toBe(2)
        expect(bad.stderr).toContain("invalid <id>")
      }))

    it.effect("dead-letters list, show and status print a stored value's control characters as escapes: no terminal is driven", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const table = sql.literal((yield* DurableSettings).table("outbox"))
        // A window title, a cleared screen, a link, a bidi override, and a line of its own.
        const topic = `${
          freshTopic("escape")
        }\u001b]0;pwned\u0007\u001b[2J\u001b]8;;http://evil.example\u0007x\u001b]8;;\u0007\u202egnp.exe`
        const error = "fail\nstate:           projected\u009b31m\u2028"
        const [id] = yield* enqueue(topic, 1)
        yield* sql`UPDATE ${table} SET ordering_key = ${"k\u001b[1m"} WHERE id = ${id!}::bigint`
        yield* TestSubstrate.settleByHand("dead", `id = ${id!}`, { last_error: `'${error}'` })
        const outputs = [
          yield* cliOn(["dead-letters", "list", "--topic", topic]),
          yield* cliOn(["dead-letters", "show", id!]),
          yield* cliOn(["status"])
        ]
        for (const output of outputs) {
          expect(output.code).toBe(0)
          expect(output.stdout + output.stderr).not.toMatch(
            /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\u2028\u2029]/
          )
          expect(output.stdout).toContain("\\u001b]0;pwned\\u0007\\u001b[2J")
        }
        const shown = outputs[1]!.stdout
        expect(shown).toContain("\\u202egnp.exe")
        expect(shown).toMatch(/^last error:\s+fail\\nstate: +projected\\u009b31m\\u2028$/m)
        expect(shown).not.toMatch(/^state:\s+projected$/m)
        // As JSON, the value is the same, every control character escaped.
        const asJson = yield* cliOn(["dead-letters", "show", id!, "--json"])
        expect(asJson.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2028\u2029]/)
        expect(json(asJson)).toMatchObject({ topic, lastError: error })
      }))

    it.effect("ids past PostgreSQL's bigint exit 2 naming the flag or argument, never 5", () =>
      Effect.gen(function*() {
        const big = "9999999999999999999"
        const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
          [["dead-letters", "list", "--id", big], "--id expects a message id"],
          [["dead-letters", "list", "--id", "9223372036854775808"], "--id expects a message id"],
          [["dead-letters", "show", big], "invalid <id>"],
          [["dead-letters", "list", "--before", big], "invalid --before"],
          [["dead-letters", "redrive", "--id", big, "--yes"], "--id expects a message id"],
          [
            ["dead-letters", "discard", "--all", "--consumer", "billing", "--id", big, "--yes"],
            "--id expects a message id"
          ]
        ]
        for (const [args, message] of cases) {
          const result = yield* cliOn(args)
          expect(result.code, args.join(" ")).toBe(2)
          expect(result.stderr, args.join(" ")).toContain(message)
        }
        // The largest id there can be is an id: nothing has it.
        const largest = yield* cliOn(["dead-letters", "show", "9223372036854775807"])
        expect(largest.code).toBe(1)
      }))

    it.effect("explain shows the claim's plan and claims nothing", () =>
      Effect.gen(function*() {
        const topic = freshTopic("explain")
        yield* enqueue(topic, 2)
        const plan = yield* cliOn(["explain", "--topic", topic, "--json"])
        expect(plan.code).toBe(0)
        expect(json(plan)[0].Plan["Node Type"]).toBeDefined()
        const text = yield* cliOn(["explain", "--topic", topic])
        expect(text.stdout).toContain("outbox_open_due_idx")
        const inbox = yield* cliOn(["explain", "--consumer", "billing"])
        expect(inbox.code).toBe(0)
        expect(inbox.stdout).toContain("on inbox")
        // Analyzed: the claim ran (it read and locked the two rows) and was rolled back.
        const analyzed = yield* cliOn(["explain", "--topic", topic, "--analyze"])
        expect(analyzed.code).toBe(0)
        expect(analyzed.stdout).toMatch(
          /-> LockRows \[rows 2\]\n\s+-> Index Scan using outbox_open_due_idx on outbox \[rows 2/
        )
        const inboxAnalyzed = yield* cliOn(["explain", "--consumer", "billing", "--analyze"])
        expect(inboxAnalyzed.code).toBe(0)
        expect(inboxAnalyzed.stdout).toMatch(/on inbox \[(rows \d+|never run)/)
        const status = json(yield* cliOn(["status", "--json"]))
        expect(status.topics.find((t: { topic: string }) => t.topic === topic)).toMatchObject({ ready: 2, claimed: 0 })
      }))

    it.effect("ledger show prints an idempotency key's record; a key without one exits 1", () =>
      Effect.gen(function*() {
        const ledger = yield* MutationLedger.MutationLedger
        const fingerprint = yield* Fingerprint.fingerprint({ cents: 500 })
        yield* ledger.execute(
          { subject: "acme", operation: "charge-card", key: "req-1" },
          { kind: "charge", eligibility: new Uint8Array(), fingerprint },
          Effect.succeed(MutationLedger.accept({ chargeId: 7 }))
        )
        const shown = yield* cliOn(["ledger", "show", "acme", "charge-card", "req-1", "--json"])
        expect(shown.code).toBe(0)
        expect(json(shown)).toMatchObject({
          subject: "acme",
          operation: "charge-card",
          key: "req-1",
          kind: "charge",
          status: "accepted",
          fingerprint: Buffer.from(fingerprint).toString("hex"),
          eligibility: "",
          response: { chargeId: 7 }
        })
        const text = yield* cliOn(["ledger", "show", "acme", "charge-card", "req-1"])
        expect(text.stdout).toMatch(/^status:\s+accepted \(effect applied\)$/m)
        const missing = yield* cliOn(["ledger", "show", "acme", "charge-card", "req-2"])
        expect(missing.code).toBe(1)
        expect(missing.stderr.trim()).toBe("effect-durable: no ledger record for acme / charge-card / req-2")
      }))

    it.effect("pause and resume a topic: a durable flag, reported whether it changed", () =>
      Effect.gen(function*() {
        const topic = freshTopic("pause")
        const admin = yield* OutboxAdmin.OutboxAdmin
        const paused = yield* cliOn(["pause", topic, "--by", "ops-oncall", "--json"])
        expect(json(paused)).toEqual({ topic, paused: true, changed: true })
        expect(paused.stderr).toContain(`operator action: pause topic ${topic} by ops-oncall`)
        expect((yield* admin.paused).find((p) => p.topic === topic)).toMatchObject({ pausedBy: "ops-oncall" })
        const again = yield* cliOn(["pause", topic])
        expect(again.stdout.trim()).toBe(`topic ${topic} was already paused`)
        const resumed = yield* cliOn(["resume", topic])
        expect(resumed.stdout.trim()).toBe(`resumed topic ${topic}: projectors were woken`)
        expect((yield* admin.paused).some((p) => p.topic === topic)).toBe(false)
      }))
  })
})
