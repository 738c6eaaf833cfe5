import { eventually } from "@effect-durable/testing/Eventually"
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as HttpServer from "effect/http/HttpServer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as SqlClient from "effect/sql/SqlClient"
import * as Approval from "../examples/approval.js"

describe("the workflow guide's approval example does what the guide says", () => {
  it.layer(TestDatabase.layerFresh({ applicationName: "workflow-http-example-test" }), { excludeTestServices: true })(
    (it) => {
      it.effect("a refund: the approver's link posted to the deferred endpoint completes it once; a decline fails it", () =>
        Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const db = yield* TestDatabase.TestDatabase
          yield* sql`CREATE TABLE approval_requests (refund_id text PRIMARY KEY, amount numeric, token text NOT NULL)`
          const tokenOf = (refundId: string) =>
            Effect.map(
              eventually(
                sql<{ token: string }>`SELECT token FROM approval_requests WHERE refund_id = ${refundId}`,
                (rows) => rows.length === 1
              ),
              (rows) => rows[0]!.token
            )
          yield* Effect.gen(function*() {
            const server = yield* HttpServer.HttpServer
            const port = "port" in server.address ? server.address.port : 0
            const decide = (token: string, decision: object) =>
              Effect.promise(() =>
                fetch(`http://127.0.0.1:${port}/workflow/deferred`, {
                  method: "POST",
                  headers: { "content-type": "application/json" },
                  body: JSON.stringify({ token, ...decision })
                }).then(async (response) => ({
                  status: response.status,
                  body: (await response.json()) as { readonly outcome?: string }
                }))
              )
            const outcome = (executionId: string) =>
              Effect.map(
                eventually(
                  Approval.Refund.poll(executionId),
                  (r) => Option.isSome(r) && r.value._tag === "Complete"
                ),
                (r) => Option.isSome(r) && r.value._tag === "Complete" ? r.value.exit : undefined
              )

            const approved = yield* Approval.Refund.execute({ refundId: "R-1", amount: 40 }, { discard: true })
            const token = yield* tokenOf("R-1")
            const first = yield* decide(token, { value: { approvedBy: "mia" } })
            const again = yield* decide(token, { value: { approvedBy: "mia" } })
            expect([first.status, first.body.outcome, again.status, again.body.outcome]).toEqual([
              200,
              "completed",
              200,
              "already-completed"
            ])
            expect(yield* outcome(approved)).toEqual(Exit.succeed("refund R-1 of 40 approved by mia"))

            const declined = yield* Approval.Refund.execute({ refundId: "R-2", amount: 900 }, { discard: true })
            const forged = yield* decide(`${(yield* tokenOf("R-2")).slice(0, -3)}abc`, { value: { approvedBy: "eve" } })
            expect(forged.status).toBe(403)
            yield* decide(yield* tokenOf("R-2"), { error: { reason: "over the limit" } })
            expect(yield* outcome(declined)).toEqual(Exit.fail({ reason: "over the limit" }))
          }).pipe(
            Effect.provide(
              Approval.AppLayer({
                connection: { url: db.url, applicationName: "workflow-approval-example" },
                tokenSecret: Redacted.make("example-secret-at-least-16-bytes"),
                port: 0
              })
            )
          )
        }))
    }
  )
})
