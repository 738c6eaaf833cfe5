// A refund that waits for a manager's approval over HTTP. The workflow signs a token for its
// own deferred and sends it to the approver (here: a row in `approval_requests`, where a mail
// job would pick it up); the approver's page posts it back to the deferred endpoint with the
// decision. Only a token this service signed opens, it expires after three days, and the
// endpoint completes the deferred once however often the approver clicks.
import * as Durable from "@effect-durable/pg/Durable"
import * as DeferredEndpoint from "@effect-durable/workflow-http/DeferredEndpoint"
import * as DeferredTokens from "@effect-durable/workflow/DeferredTokens"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as Layer from "effect/Layer"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as Http from "node:http"

export const Declined = Schema.Struct({ reason: Schema.String })

/** The manager's decision: approved by whom, or declined with a reason. */
export const Approval = DurableDeferred.make("RefundApproval", {
  success: Schema.Struct({ approvedBy: Schema.String }),
  error: Declined
})

export const Refund = Workflow.make("Refund", {
  payload: { refundId: Schema.String, amount: Schema.Number },
  success: Schema.String,
  error: Declined,
  idempotencyKey: ({ refundId }) => refundId
})

export const RefundLayer = Refund.toLayer(({ amount, refundId }) =>
  Effect.gen(function*() {
    // The token names this execution's deferred; signing it in an activity keeps the link the
    // approver got stable across replays (its expiry is taken once).
    const token = yield* DurableDeferred.token(Approval)
    yield* Activity.make({
      name: "ask-approval",
      execute: Effect.gen(function*() {
        const signed = yield* Effect.orDie((yield* DeferredTokens.DeferredTokens).sign(token, { expiresIn: "3 days" }))
        const sql = yield* SqlClient.SqlClient
        yield* Effect.orDie(sql`INSERT INTO approval_requests (refund_id, amount, token)
                                VALUES (${refundId}, ${amount}, ${signed}) ON CONFLICT DO NOTHING`)
      })
    })
    const { approvedBy } = yield* DurableDeferred.await(Approval)
    return `refund ${refundId} of ${amount} approved by ${approvedBy}`
  })
)

/** The service: the endpoint at POST /workflow/deferred, the workflow, the engine, the substrate. */
export const AppLayer = (options: {
  readonly connection: Durable.Options["connection"]
  readonly tokenSecret: Redacted.Redacted<string>
  readonly port: number
}) =>
  HttpRouter.serve(DeferredEndpoint.layer({ deferreds: [Approval] })).pipe(
    Layer.provideMerge(NodeHttpServer.layer(Http.createServer, { port: options.port, host: "127.0.0.1" })),
    Layer.provideMerge(RefundLayer),
    Layer.provideMerge(DeferredTokens.layer([{ id: "2026-12", secret: options.tokenSecret }])),
    Layer.provideMerge(PgWorkflowEngine.layer()),
    Layer.provideMerge(Durable.layer({ connection: options.connection, migrate: true }))
  )
