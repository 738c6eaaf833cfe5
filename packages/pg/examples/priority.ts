// Priority with a bound on waiting: a mail service sends password resets at once, receipts
// within a minute and newsletters within an hour. Each message carries how long it may wait
// behind later ones (`maxWait`); claims take the earliest due time first (ready, plus the
// wait), so a reset enqueued behind a hundred thousand newsletters goes next, and a newsletter
// is never starved: once its hour has passed, nothing enqueued after it goes before it.
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"

const waits = { reset: "0 seconds", receipt: "1 minute", newsletter: "1 hour" } as const

export const send = (kind: keyof typeof waits, to: string) =>
  Effect.flatMap(Outbox.Outbox, (outbox) => outbox.enqueue("mail", { kind, to }, { maxWait: waits[kind] }))

/** A campaign: thousands of newsletters in one statement, each allowed its hour. */
export const campaign = (recipients: ReadonlyArray<string>) =>
  Effect.flatMap(Outbox.Outbox, (outbox) =>
    outbox.enqueueMany(
      recipients.map((to) => ({
        topic: "mail",
        payload: { kind: "newsletter", to },
        options: { maxWait: waits.newsletter }
      }))
    ))
