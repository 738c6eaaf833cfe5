// A shipment that waits for the courier's confirmation, for a bounded time. The booking goes out
// through the outbox in the activity's own transaction, carrying the deferred's token. If the
// booking dies (the courier refuses it for good), a sweep of the topic's dead letters fails the
// wait with the reason; the deadline ends any wait nothing else ends (no answer, ever).
import { InvalidInput } from "@effect-durable/core/Errors"
import * as Durable from "@effect-durable/pg/Durable"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as DurableDeadline from "@effect-durable/workflow/DurableDeadline"
import * as PgWorkflowEngine from "@effect-durable/workflow/PgWorkflowEngine"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Activity from "effect/workflow/Activity"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"

export const Refused = Schema.Struct({ reason: Schema.String })

/** The courier's answer: picked up by whom, or refused with a reason. */
export const PickedUp = DurableDeferred.make("PickedUp", { success: Schema.String, error: Refused })

export const Shipment = Workflow.make("Shipment", {
  // How long to wait for the courier, in milliseconds (a service would write `within: "2 days"`).
  payload: { parcelId: Schema.String, waitMillis: Schema.Number },
  success: Schema.String,
  error: Schema.Union([Refused, DurableDeadline.DeadlinePassed, InvalidInput]),
  idempotencyKey: ({ parcelId }) => parcelId
})

export const ShipmentLayer = Shipment.toLayer(({ parcelId, waitMillis }) =>
  Effect.gen(function*() {
    const token = yield* DurableDeferred.token(PickedUp)
    // The booking commits with the activity's record: sent once, however often the run replays.
    yield* Activity.make({
      name: "book-courier",
      execute: Effect.flatMap(Outbox.Outbox, (outbox) => outbox.enqueue("courier.book", { parcelId, token })).pipe(
        Effect.orDie,
        Effect.asVoid
      )
    }).pipe(PgWorkflowEngine.transactional)
    const courier = yield* DurableDeadline.awaitWithin(PickedUp, { within: waitMillis })
    return `parcel ${parcelId} picked up by ${courier}`
  })
)

/**
 * The sweep (run it on a schedule, `Schedules`): each dead booking fails its shipment's wait with
 * the booking's last error. Failing a deferred twice is harmless (the first write wins), so the
 * sweep can look at the same dead letters again.
 */
export const failDeadBookings = Effect.gen(function*() {
  const search = yield* OutboxSearch.OutboxSearch
  const dead = yield* search.messages({ topic: "courier.book", state: "dead" }, { limit: 100 })
  for (const summary of dead.items) {
    const message = yield* search.message(summary.id)
    if (Option.isNone(message)) continue
    const { token } = message.value.payload as { readonly token: DurableDeferred.Token }
    yield* DurableDeferred.fail(PickedUp, { token, error: { reason: summary.lastError ?? "the booking is dead" } })
  }
  return dead.items.length
})

export const AppLayer = (connection: Durable.Options["connection"]) =>
  ShipmentLayer.pipe(
    Layer.provideMerge(PgWorkflowEngine.layer()),
    Layer.provideMerge(Durable.layer({ connection, migrate: true }))
  )
