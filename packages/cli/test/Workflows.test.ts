// `effect-durable workflows`: list, show, interrupt, resume, run as the built binary on
// executions as the engine stores them (rows written here: the CLI needs no workflow code).
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import { cliOn, json, Substrate } from "./support.js"

const seed = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status, result,
                                                      deploy_version)
             VALUES ('Billing', 'e-1', '{"invoice":7}', 'f', 'suspended', '{"_tag":"Suspended"}', '2026.12.07'),
                    ('Billing', 'e-2', '{"invoice":8}', 'f', 'running', NULL, NULL)`
  yield* sql`INSERT INTO durable.workflow_steps (workflow, execution_id, kind, name, attempt, result)
             VALUES ('Billing', 'e-1', 'activity', 'charge', 1, '{"_tag":"Complete"}')`
})

describe("effect-durable workflows", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("list and show the executions; interrupt and resume are durable requests, reported whether they applied", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* seed
        const listed = yield* cliOn(["workflows", "list", "--json"])
        expect(listed.code).toBe(0)
        expect(json(listed).executions.map((e: { executionId: string }) => e.executionId).sort()).toEqual([
          "e-1",
          "e-2"
        ])
        const suspended = yield* cliOn(["workflows", "list", "--status", "suspended"])
        expect(suspended.stdout).toMatch(/^Billing\s+e-1\s+suspended\s+0\s/m)
        expect(suspended.stdout).not.toMatch(/e-2/)

        const shown = yield* cliOn(["workflows", "show", "Billing", "e-1"])
        expect(shown.code).toBe(0)
        expect(shown.stdout).toMatch(/^status:\s+suspended$/m)
        expect(shown.stdout).toMatch(/^activity\s+charge\s+1\s/m)
        // The deploy version it started under.
        expect(shown.stdout).toMatch(/^version:\s+2026\.12\.07$/m)
        const missing = yield* cliOn(["workflows", "show", "Billing", "e-9"])
        expect(missing.code).toBe(1)

        // Resume: the suspended one gets a run message; the running one is left alone.
        expect(json(yield* cliOn(["workflows", "resume", "Billing", "e-1", "--json"]))).toMatchObject({ changed: true })
        expect(json(yield* cliOn(["workflows", "resume", "Billing", "e-2", "--json"]))).toMatchObject({
          changed: false
        })
        const runs = yield* sql<{ ordering_key: string }>`
          SELECT ordering_key FROM durable.outbox_messages WHERE topic = 'workflow.run:Billing'`
        expect(runs.map((r) => r.ordering_key)).toEqual(["Billing/e-1"])

        const interrupted = yield* cliOn(["workflows", "interrupt", "Billing", "e-2"])
        expect(interrupted.stdout).toMatch(/interrupt requested/)
        const [row] = yield* sql<{ interrupt_requested: boolean }>`
          SELECT interrupt_requested FROM durable.workflow_executions WHERE execution_id = 'e-2'`
        expect(row?.interrupt_requested).toBe(true)

        // purge: complete executions past the retention, dry run first.
        yield* sql`UPDATE durable.workflow_executions SET status = 'complete', completed_at = now() - interval '3 days'
                    WHERE execution_id = 'e-1'`
        expect(json(yield* cliOn(["workflows", "purge", "--older-than", "1d", "--dry-run", "--json"])))
          .toMatchObject({ wouldDelete: 1 })
        const purged = yield* cliOn(["workflows", "purge", "--older-than", "1d"])
        expect(purged.stdout).toMatch(/^deleted 1 complete workflow execution \(with their steps\)/m)
        const under = yield* cliOn(["workflows", "purge", "--older-than", "5m"])
        expect(under.code).toBe(2)
        expect(under.stderr).toMatch(/--older-than: a duration from 1 hour/)
      }))

    it.effect("long ids: list shows a short form every command takes back; an ambiguous or too short prefix names nothing", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // Ids as Workflow derives them (64 hex characters); two share their first 8.
        const a = `abcdef01${"1".repeat(56)}`
        const b = `abcdef01${"2".repeat(56)}`
        const c = `0123456789ab${"3".repeat(52)}`
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status)
                   VALUES ('Hashed', ${a}, '{}', 'f', 'suspended'), ('Hashed', ${b}, '{}', 'f', 'suspended'),
                          ('Hashed', ${c}, '{}', 'f', 'running')`
        const listed = yield* cliOn(["workflows", "list", "--workflow", "Hashed"])
        expect(listed.stdout).toMatch(new RegExp(`^Hashed\\s+${a.slice(0, 12)}\\s+suspended`, "m"))
        expect(listed.stdout).not.toContain(a)
        expect((yield* cliOn(["workflows", "list", "--workflow", "Hashed", "--full-ids"])).stdout).toContain(a)
        // The short form, copied from the list, names its execution.
        const shown = yield* cliOn(["workflows", "show", "Hashed", a.slice(0, 12)])
        expect(shown.code).toBe(0)
        expect(shown.stdout).toContain(`Hashed / ${a}`)
        expect(json(yield* cliOn(["workflows", "resume", "Hashed", b.slice(0, 12), "--json"]))).toEqual({
          workflow: "Hashed",
          executionId: b,
          changed: true
        })
        // A prefix two ids share is refused, naming the argument; nothing is resumed.
        const ambiguous = yield* cliOn(["workflows", "resume", "Hashed", "abcdef01"])
        expect(ambiguous.code).toBe(2)
        expect(ambiguous.stderr).toMatch(/executionId.*more than one starts with abcdef01/)
        // Under six characters a prefix names nothing; LIKE's wildcards are only characters.
        expect((yield* cliOn(["workflows", "show", "Hashed", "01234"])).code).toBe(1)
        expect((yield* cliOn(["workflows", "show", "Hashed", "0123%%"])).code).toBe(1)
        expect((yield* cliOn(["workflows", "show", "Hashed", "______"])).code).toBe(1)
        // A whole id of 12 characters that begins another's is listed like that one's short form: refused, not guessed.
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status)
                   VALUES ('Hashed', '0123456789ab', '{}', 'f', 'suspended')`
        const collided = yield* cliOn(["workflows", "resume", "Hashed", "0123456789ab"])
        expect(collided.code).toBe(2)
        expect(collided.stderr).toMatch(/executionId/)
        const [row] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM durable.outbox_messages WHERE topic = 'workflow.run:Hashed'`
        expect(row!.n).toBe(1)
      }))

    it.effect("a bad status or an empty name exits 2 naming it, and changes nothing", () =>
      Effect.gen(function*() {
        const status = yield* cliOn(["workflows", "list", "--status", "stuck"])
        expect(status.code).toBe(2)
        expect(status.stderr).toMatch(/status/)
        const empty = yield* cliOn(["workflows", "interrupt", "", "e-1"])
        expect(empty.code).toBe(2)
        expect(empty.stderr).toMatch(/workflow/)
      }))

    it.effect("what suspended executions wait on: list and show say it (a clock with its due time), waiting counts them; --attribute finds one", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status,
                                                           result, waiting_on)
                   VALUES ('Renewal', 'r-1', '{}', 'f', 'suspended', '{"_tag":"Suspended"}',
                           '[{"kind":"deferred","name":"Renewal/Confirmed"},{"kind":"clock","name":"grace"}]'),
                          ('Renewal', 'r-2', '{}', 'f', 'suspended', '{"_tag":"Suspended"}',
                           '[{"kind":"deferred","name":"Renewal/Confirmed"}]')`
        const [clock] = yield* sql<{ id: string; due: string }>`
          INSERT INTO durable.outbox (topic, payload, available_at)
          VALUES ('workflow.clock:Renewal', '{"executionId":"r-1"}', '2026-12-31 09:00:00+00')
          RETURNING id::text, to_char(available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS due`
        yield* sql`INSERT INTO durable.workflow_steps (workflow, execution_id, kind, name, attempt, outbox_id)
                   VALUES ('Renewal', 'r-1', 'clock', 'grace', 0, ${clock!.id}::bigint)`
        const listed = yield* cliOn(["workflows", "list", "--workflow", "Renewal"])
        expect(listed.stdout).toMatch(/WAITING ON/)
        expect(listed.stdout).toMatch(/^Renewal\s+r-1\s+suspended\s.*deferred Renewal\/Confirmed, clock grace/m)
        const shown = yield* cliOn(["workflows", "show", "Renewal", "r-1"])
        expect(shown.stdout).toMatch(/^waiting:\s+deferred Renewal\/Confirmed$/m)
        expect(shown.stdout).toContain(`clock grace due ${clock!.due}`)
        expect(json(yield* cliOn(["workflows", "show", "Renewal", "r-1", "--json"])).waits).toEqual([
          { kind: "deferred", name: "Renewal/Confirmed" },
          { kind: "clock", name: "grace", dueAt: clock!.due }
        ])
        const waiting = yield* cliOn(["workflows", "waiting", "--workflow", "Renewal", "--json"])
        expect(waiting.code).toBe(0)
        expect(
          json(waiting).waiting.map((c: { kind: string; name: string; executions: number }) =>
            `${c.kind} ${c.name} ${c.executions}`
          )
        ).toEqual(["deferred Renewal/Confirmed 2", "clock grace 1"])
        const table = yield* cliOn(["workflows", "waiting"])
        expect(table.stdout).toMatch(/^Renewal\s+deferred Renewal\/Confirmed\s+2\s/m)
        // Found by a searchable attribute; shown by show.
        yield* sql`UPDATE durable.workflow_executions SET attributes = '{"subscription":"48"}' WHERE execution_id = 'r-2'`
        const byAttribute = yield* cliOn(["workflows", "list", "--attribute", "subscription=48", "--json"])
        expect(json(byAttribute).executions.map((e: { executionId: string }) => e.executionId)).toEqual(["r-2"])
        expect((yield* cliOn(["workflows", "show", "Renewal", "r-2"])).stdout).toMatch(
          /^attribute:\s+subscription=48$/m
        )
        const malformed = yield* cliOn(["workflows", "list", "--attribute", "subscription"])
        expect(malformed.code).toBe(2)
        expect(malformed.stderr).toMatch(/NAME=VALUE/)
      }))

    it.effect("pending executions of a limited workflow say they wait on its limit, with their group; waiting counts them by group", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status,
                                                           run_group)
                   VALUES ('Charge', 'c-1', '{}', 'f', 'pending', 'acme'), ('Charge', 'c-2', '{}', 'f', 'pending', 'acme'),
                          ('Charge', 'c-3', '{}', 'f', 'running', 'acme'), ('Charge', 'c-4', '{}', 'f', 'pending', NULL)`
        // Not limited yet: nothing holds them.
        const before = yield* cliOn(["workflows", "list", "--workflow", "Charge", "--json"])
        expect(json(before).executions.map((e: { waitingOn: unknown }) => e.waitingOn)).toEqual([
          null,
          null,
          null,
          null
        ])
        expect((yield* cliOn(["limits", "set", "workflow.run:Charge", "--group-max", "1"])).code).toBe(0)
        const listed = yield* cliOn(["workflows", "list", "--workflow", "Charge", "--status", "pending"])
        expect(listed.stdout).toMatch(/^Charge\s+c-1\s+pending\s.*the workflow's limit \(group acme\)/m)
        // c-4 has no group: a per-group limit does not hold it (the claim applies none to it).
        expect(listed.stdout).toMatch(/^Charge\s+c-4\s+pending\s/m)
        expect(listed.stdout).not.toMatch(/^Charge\s+c-4\s.*limit/m)
        const shown = yield* cliOn(["workflows", "show", "Charge", "c-2"])
        expect(shown.stdout).toMatch(/^group:\s+acme$/m)
        expect(shown.stdout).toMatch(/^waiting:\s+the workflow's limit \(group acme\)$/m)
        const waiting = yield* cliOn(["workflows", "waiting", "--workflow", "Charge", "--json"])
        expect(
          json(waiting).waiting.map((c: { kind: string; name: string; executions: number }) =>
            `${c.kind} ${c.name} ${c.executions}`
          )
        ).toEqual(["limit acme 2"])
        // A limit of the workflow's own holds every pending one, with a group or without.
        expect((yield* cliOn(["limits", "set", "workflow.run:Charge", "--max", "5"])).code).toBe(0)
        const all = yield* cliOn(["workflows", "waiting", "--workflow", "Charge", "--json"])
        expect(
          json(all).waiting.map((c: { kind: string; name: string; executions: number }) =>
            `${c.kind} ${c.name} ${c.executions}`
          )
        ).toEqual(["limit acme 2", "limit  1"])
        expect((yield* cliOn(["limits", "clear", "workflow.run:Charge"])).code).toBe(0)
      }))
    it.effect("versions counts unfinished runs by the version they started under, diverged ones apart; patches says which branch each took and whether the old one can go", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status,
                                                            deploy_version, waiting_on, completed_at)
                   VALUES ('Shipping', 's-1', '{}', 'f', 'suspended', 'v1', '[{"kind":"diverged","step":"activity x","unreached":[]}]', NULL),
                          ('Shipping', 's-2', '{}', 'f', 'suspended', 'v1', '[{"kind":"deferred","name":"Signed"}]', NULL),
                          ('Shipping', 's-3', '{}', 'f', 'running', 'v2', NULL, NULL),
                          ('Shipping', 's-4', '{}', 'f', 'complete', 'v1', NULL, now())`
        yield* sql`INSERT INTO durable.workflow_steps (workflow, execution_id, kind, name, attempt, result)
                   VALUES ('Shipping', 's-2', 'patch', 'insured', 0, 'false'), ('Shipping', 's-3', 'patch', 'insured', 0, 'true'),
                          ('Shipping', 's-4', 'patch', 'insured', 0, 'false')`
        const versions = json(yield* cliOn(["workflows", "versions", "--workflow", "Shipping", "--json"])).versions
        expect(
          versions.map((v: { version: string; unfinished: number; diverged: number }) =>
            `${v.version} ${v.unfinished} ${v.diverged}`
          )
        ).toEqual(["v1 2 1", "v2 1 0"])
        const table = yield* cliOn(["workflows", "versions"])
        expect(table.stdout).toMatch(/^Shipping\s+v1\s+2\s+1\s/m)
        // s-4 is complete: it holds nothing. s-1 has not met the patch yet: undecided.
        const patches = yield* cliOn(["workflows", "patches", "Shipping"])
        expect(patches.stdout).toMatch(/^insured\s+1\s+1\s+1\s+no$/m)
        expect(json(yield* cliOn(["workflows", "patches", "Shipping", "other", "--json"])).patches).toEqual([
          { patch: "other", patched: 0, unpatched: 0, undecided: 3, droppable: false }
        ])
        const none = yield* cliOn(["workflows", "patches", "Nothing"])
        expect(none.stdout).toMatch(/no unfinished execution of Nothing recorded a patch \(0 unfinished executions\)/)

        // s-5 is pinned to v0, its run due for two minutes and claimed by nobody: stranded.
        yield* sql`INSERT INTO durable.workflow_executions (workflow, execution_id, payload, payload_fingerprint, status,
                                                            deploy_version, pinned)
                   VALUES ('Shipping', 's-5', '{}', 'f', 'pending', 'v0', true)`
        yield* sql`INSERT INTO durable.outbox (topic, ordering_key, payload, available_at)
                   VALUES ('workflow.run:Shipping@v0', 'Shipping/s-5', '{"executionId":"s-5"}', now() - interval '2 minutes')`
        const strandedRuns = yield* cliOn(["workflows", "stranded", "--workflow", "Shipping"])
        expect(strandedRuns.stdout).toMatch(/^Shipping\s+s-5\s+v0\s/m)
        expect((yield* cliOn(["workflows", "versions", "--workflow", "Shipping"])).stdout).toMatch(
          /^Shipping\s+v0\s+1\s+0\s+1\s/m
        )
        // Repinned to v2: its run moves to v2's topic; unpinned: to the workflow's own.
        expect(json(yield* cliOn(["workflows", "repin", "Shipping", "s-5", "v2", "--json"]))).toMatchObject({
          changed: true
        })
        const topicOf = Effect.map(
          sql<{ topic: string }>`SELECT topic FROM durable.outbox WHERE ordering_key = 'Shipping/s-5'`,
          (rows) => rows.map((row) => row.topic)
        )
        expect(yield* topicOf).toEqual(["workflow.run:Shipping@v2"])
        expect((yield* cliOn(["workflows", "repin", "Shipping", "s-5", "--unpin"])).stdout).toMatch(/^unpinned/m)
        expect(yield* topicOf).toEqual(["workflow.run:Shipping"])
        const neither = yield* cliOn(["workflows", "repin", "Shipping", "s-5"])
        expect(neither.code).toBe(2)
        expect(json(yield* cliOn(["workflows", "stranded", "--json"])).stranded).toEqual([])

        // A fork of s-2 from its patch marker: the journal before it (nothing) kept, a run due.
        const forked = json(
          yield* cliOn(["workflows", "fork", "Shipping", "s-2", "--from", "patch:insured", "--attempt", "0", "--json"])
        )
        expect(forked.forked).toMatch(/^s-2\/fork-[0-9a-f]{8}$/)
        const runs = yield* sql<
          { topic: string }
        >`SELECT topic FROM durable.outbox WHERE ordering_key = ${`Shipping/${forked.forked}`}`
        expect(runs).toEqual([{ topic: "workflow.run:Shipping" }])
        const badFrom = yield* cliOn(["workflows", "fork", "Shipping", "s-2", "--from", "charge"])
        expect(badFrom.code).toBe(2)
        expect(badFrom.stderr).toMatch(/--from: KIND:NAME/)
        const noStep = yield* cliOn(["workflows", "fork", "Shipping", "s-2", "--from", "activity:nope"])
        expect(noStep.code).toBe(2)
        expect(noStep.stderr).toMatch(/a step the journal of s-2 holds/)
      }))
  })
})
