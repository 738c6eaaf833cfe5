/**
 * `npm start -- --demo`: the scripted story, told by a client of the running service over
 * HTTP. Each step prints what was sent and what came back, and checks it: a step that does not
 * behave as described fails the demo (exit code 1). Keys carry the run's id, so every run
 * tells the same story on the kept data.
 */
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import { format } from "./Money.js"
import { TRANSFER_COMPLETED } from "./Transfers.js"

class DemoFailed extends Data.TaggedError("DemoFailed")<{ readonly message: string }> {}

interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly bytes: Uint8Array
  readonly text: string
  readonly body: any
}

const started = Date.now()
const say = (text: string) => Console.log(`[${String(Date.now() - started).padStart(6)} ms] ${text}`)
const check = (holds: boolean, what: string) => holds ? Effect.void : Effect.fail(new DemoFailed({ message: what }))
const sameBytes = (a: Reply, b: Reply) => Buffer.from(a.bytes).equals(Buffer.from(b.bytes))

export const run = Effect.fn("Demo.run")(function*(url: string) {
  const runId = Date.now().toString(36)
  const call = (
    method: string,
    path: string,
    options: { readonly user?: string; readonly key?: string; readonly body?: unknown; readonly ifMatch?: string } = {}
  ) =>
    Effect.promise(async (): Promise<Reply> => {
      const headers: Record<string, string> = {}
      if (options.user !== undefined) headers.authorization = `Bearer ${options.user}`
      if (options.key !== undefined) headers["idempotency-key"] = `${runId}-${options.key}`
      if (options.ifMatch !== undefined) headers["if-match"] = options.ifMatch
      if (options.body !== undefined) headers["content-type"] = "application/json"
      const response = await fetch(`${url}${path}`, {
        method,
        headers,
        ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) })
      })
      const bytes = new Uint8Array(await response.arrayBuffer())
      const text = Buffer.from(bytes).toString("utf8")
      const body = response.headers.get("content-type")?.includes("json") === true ? JSON.parse(text) : text
      return { status: response.status, headers: response.headers, bytes, text, body }
    })
  const replayed = (reply: Reply) => reply.headers.get("idempotent-replayed") === "true"
  const transfer = (key: string, from: number, to: number, amount: number) =>
    call("POST", "/transfers", { user: "alice", key, body: { from, to, amount } })

  yield* say(`demo run ${runId} against ${url}`)

  yield* say("1. alice and bob open accounts (POST /accounts with an Idempotency-Key)")
  const opened = yield* call("POST", "/accounts", {
    user: "alice",
    key: "open-alice",
    body: { name: "Alice", deposit: 100_000 }
  })
  const bobOpened = yield* call("POST", "/accounts", {
    user: "bob",
    key: "open-bob",
    body: { name: "Bob", deposit: 1_000 }
  })
  yield* check(opened.status === 201 && bobOpened.status === 201, "opening accounts answers 201")
  const alice: number = opened.body.id
  const bob: number = bobOpened.body.id
  yield* say(
    `   201 Location: ${opened.headers.get("location")}, ETag: ${opened.headers.get("etag")}; bob's is account ${bob}`
  )

  yield* say(`2. first request: alice moves ${format(2_500)} to bob`)
  const first = yield* transfer("rent", alice, bob, 2_500)
  yield* check(first.status === 201 && !replayed(first), "a first transfer answers 201, not replayed")
  yield* say(`   ${first.status} ${first.text}`)

  yield* say("3. exact retry (the client never saw the answer): the same request with the same key")
  const retry = yield* transfer("rent", alice, bob, 2_500)
  yield* check(retry.status === 201 && replayed(retry) && sameBytes(retry, first), "an exact retry replays the bytes")
  yield* say(`   ${retry.status}, Idempotent-Replayed: true, the same bytes: ${retry.text}`)

  yield* say(`4. conflicting retry: the same key with ${format(3_000)}`)
  const conflict = yield* transfer("rent", alice, bob, 3_000)
  yield* check(conflict.status === 422, "the same key on another request is 422")
  yield* say(`   ${conflict.status} ${conflict.headers.get("content-type")}: ${conflict.body.title}`)

  yield* say(`5. concurrent retries: 8 copies of one request (${format(1_000)}) at once`)
  const copies = yield* Effect.all(Array.from({ length: 8 }, () => transfer("coffee", alice, bob, 1_000)), {
    concurrency: "unbounded"
  })
  const executed = copies.filter((reply) => reply.status === 201 && !replayed(reply)).length
  const replays = copies.filter(replayed).length
  const inFlight = copies.filter((reply) => reply.status === 409).length
  yield* check(
    executed === 1 && replays + inFlight === 7,
    "one of 8 concurrent copies runs; the others replay or get 409"
  )
  yield* say(`   ran once; ${replays} replayed, ${inFlight} answered 409 (in flight; Retry-After: 1)`)
  const again = yield* transfer("coffee", alice, bob, 1_000)
  yield* check(replayed(again), "after it completes every copy replays")
  yield* say(`   retried after it completed: ${again.status}, replayed`)

  yield* say(`6. a rejection is stored too: alice moves ${format(5_000_000)}`)
  const broke = yield* transfer("yacht", alice, bob, 5_000_000)
  const brokeAgain = yield* transfer("yacht", alice, bob, 5_000_000)
  yield* check(
    broke.status === 402 && brokeAgain.status === 402 && replayed(brokeAgain),
    "a 402 is stored and replayed"
  )
  yield* say(`   ${broke.status} ${broke.text}; the retry: ${brokeAgain.status}, replayed`)

  yield* say("7. alice's entries, two per page, following `next` (cursors are signed)")
  let next: string | null = `/accounts/${alice}/entries?limit=2`
  const amounts: Array<number> = []
  const cursors: Array<string> = []
  for (let page = 1; next !== null; page++) {
    const reply: Reply = yield* call("GET", next, { user: "alice" })
    yield* check(reply.status === 200, "a page answers 200")
    amounts.push(...reply.body.items.map((entry: { amount: number }) => entry.amount))
    yield* say(`   GET ${next.length > 60 ? `${next.slice(0, 60)}...` : next}`)
    yield* say(`     ${reply.body.items.map((entry: { amount: number }) => format(entry.amount)).join(", ")}`)
    next = reply.body.next
    if (next !== null) cursors.push(new URL(next, url).searchParams.get("cursor")!)
  }
  yield* check(
    JSON.stringify(amounts) === JSON.stringify([-1_000, -2_500, 100_000]),
    "entries: -10.00, -25.00, 1000.00"
  )
  // A cursor is bound to the user and the account it was issued for.
  const foreign = yield* call("GET", `/accounts/${bob}/entries?limit=2&cursor=${encodeURIComponent(cursors[0]!)}`, {
    user: "bob"
  })
  yield* check(foreign.status === 400, "alice's cursor does not page bob's account")
  yield* say(`   alice's cursor on bob's account: ${foreign.status} ${foreign.text}`)

  yield* say("8. compare-and-swap: rename alice's account with If-Match")
  const current = yield* call("GET", `/accounts/${alice}`, { user: "alice" })
  const etag = current.headers.get("etag")!
  const renamed = yield* call("PUT", `/accounts/${alice}`, {
    user: "alice",
    ifMatch: etag,
    body: { name: "Alice main" }
  })
  const stale = yield* call("PUT", `/accounts/${alice}`, { user: "alice", ifMatch: etag, body: { name: "Alice old" } })
  const blind = yield* call("PUT", `/accounts/${alice}`, { user: "alice", body: { name: "Alice blind" } })
  yield* check(renamed.status === 200 && stale.status === 412 && blind.status === 428, "PUT: 200, then 412, then 428")
  yield* say(`   If-Match ${etag}: ${renamed.status}, ETag ${renamed.headers.get("etag")}`)
  yield* say(`   If-Match ${etag} again: ${stale.status} ${stale.text}`)
  yield* say(`   no If-Match: ${blind.status} ${blind.text}`)

  yield* say("9. deliveries: the projector POSTs each transfer to the notification webhook")
  const notifications = call("GET", `/accounts/${bob}/notifications`, { user: "bob" })
  const delivered = yield* notifications.pipe(
    Effect.repeat({ until: (reply) => reply.body.length === 2, schedule: Schedule.spaced("100 millis") }),
    Effect.timeoutOrElse({
      duration: "30 seconds",
      orElse: () => Effect.fail(new DemoFailed({ message: "both transfers notified" }))
    })
  )
  for (const notification of delivered.body) yield* say(`   bob: ${notification.text}`)
  // What a lost answer to the webhook would cause: the same message delivered again.
  const sql = yield* SqlClient.SqlClient
  const outbox = sql.literal((yield* DurableSettings).table("outbox_messages"))
  const [message] = yield* sql<{ id: string }>`
    SELECT id::text AS id FROM ${outbox} WHERE topic = ${TRANSFER_COMPLETED} AND payload->>'transfer' = ${
    String(first.body.id)
  }`
  const admin = yield* OutboxAdmin.OutboxAdmin
  yield* admin.replay([message!.id])
  yield* admin.unprojectedCount(TRANSFER_COMPLETED).pipe(
    Effect.repeat({ until: (n) => n === 0, schedule: Schedule.spaced("100 millis") })
  )
  const afterReplay = yield* notifications
  yield* check(afterReplay.body.length === 2, "a redelivered message is applied once")
  yield* say(
    `   message ${
      message!.id
    } delivered again: the inbox knew it, bob still has ${afterReplay.body.length} notifications`
  )

  yield* say("done: every step behaved as described")
})
