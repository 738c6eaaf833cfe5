/**
 * `effect-durable dead-letters list|show|redrive|discard`: the messages that could not be
 * delivered. Filters: `--topic`, `--id` (repeatable), `--older-than` (dead for longer than),
 * `--error` (an error group); `--consumer` works on the stored inbox's dead entries instead.
 * Redrive and discard count what matches, ask before acting (unless `--yes`) and act in
 * bounded batches that each commit, with progress on stderr, on no more than the count asked
 * about: Ctrl-C leaves whole batches done and the rest untouched.
 */
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as OutboxBulk from "@effect-durable/pg/OutboxBulk"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import * as Argument from "effect/cli/Argument"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { confirm, duration, ids, json, positive, toggle, yes } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { checkFailed, usage } from "../errors.js"
import * as Output from "../output.js"

const topic = Flag.String("topic").pipe(
  Flag.withMetavar("TOPIC"),
  Flag.optional,
  Flag.withDescription("Only this outbox topic")
)
const olderThan = duration("older-than").pipe(
  Flag.optional,
  Flag.withDescription("Dead for longer than this (30m, 12h, 7d)")
)
const error = Flag.String("error").pipe(
  Flag.withMetavar("TEXT"),
  Flag.optional,
  Flag.withDescription(
    "Only messages whose error group starts with this: a group as list --json (errorGroup) and the admin page show it, a raw last error, or the start of either (digits match any number)"
  )
)
const consumer = Flag.String("consumer").pipe(
  Flag.withMetavar("CONSUMER"),
  Flag.optional,
  Flag.withDescription("The stored inbox's dead entries of this consumer, instead of the outbox")
)
const filters = { topic, ids, olderThan, error, consumer }

interface Filters {
  readonly topic: Option.Option<string>
  readonly ids: ReadonlyArray<string>
  readonly olderThan: Option.Option<Duration.Input>
  readonly error: Option.Option<string>
  readonly consumer: Option.Option<string>
}

/** The outbox filter the flags describe; dead letters only. */
const outboxFilter = (f: Filters): OutboxSearch.MessageFilter => ({
  state: "dead",
  ...(f.ids.length > 0 ? { ids: f.ids } : {}),
  ...Option.match(f.topic, { onNone: () => ({}), onSome: (topic) => ({ topic }) }),
  ...Option.match(f.olderThan, { onNone: () => ({}), onSome: (deadFor) => ({ deadFor }) }),
  ...Option.match(f.error, { onNone: () => ({}), onSome: (error) => ({ error }) })
})

/** `--consumer` works on the inbox, whose dead entries are listed and acted on by consumer and id only. */
const inboxOnly = (f: Filters) =>
  Option.isSome(f.topic) || Option.isSome(f.olderThan) || Option.isSome(f.error)
    ? usage(
      "--consumer selects the inbox's dead entries, by consumer and --id only (--topic, --older-than and --error are the outbox's)"
    )
    : Effect.void

const describe = (f: Filters) => {
  const parts = [
    ...Option.toArray(Option.map(f.topic, (t) => `topic ${t}`)),
    ...(f.ids.length > 0 ? [`ids ${f.ids.join(", ")}`] : []),
    ...Option.toArray(Option.map(f.olderThan, (d) => `dead for more than ${d}`)),
    ...Option.toArray(Option.map(f.error, (e) => `error "${Output.clip(e, 40)}"`))
  ]
  return parts.length === 0 ? "" : ` (${Output.printable(parts.join("; "))})`
}

const list = Command.make(
  "list",
  {
    ...filters,
    limit: positive("limit", 50, 1000, "Rows per page"),
    before: Flag.String("before").pipe(
      Flag.withMetavar("ID"),
      Flag.optional,
      Flag.withDescription("The page after this id (printed as 'more: --before ...')")
    ),
    json
  },
  Effect.fn("effect-durable.dead-letters.list")(
    function*(args) {
      const page = {
        limit: args.limit,
        ...Option.match(args.before, { onNone: () => ({}), onSome: (before) => ({ before }) })
      }
      if (Option.isSome(args.consumer)) {
        yield* inboxOnly(args)
        if (args.ids.length > 0) {
          return yield* usage("list --consumer pages by --before; --id is for redrive and discard")
        }
        const inbox = yield* InboxAdmin.InboxAdmin
        const result = yield* inbox.deadLetters({ consumer: args.consumer.value, ...page })
        if (args.json) return yield* Output.json(result)
        yield* Output.line(
          result.items.length === 0 ? "no dead inbox entries" : Output.table<(typeof result.items)[number]>([
            { header: "ID", value: (d) => d.id },
            { header: "MESSAGE", value: (d) => Output.clip(d.messageId, 40) },
            { header: "ATTEMPTS", value: (d) => d.attempts },
            { header: "DEAD AT", value: (d) => d.deadAt.slice(0, 19).replace("T", " ") },
            { header: "LAST ERROR", value: (d) => Output.clip(d.lastError) }
          ], result.items)
        )
        if (result.next !== undefined) yield* Output.note(`more: --before ${result.next}`)
        return
      }
      const search = yield* OutboxSearch.OutboxSearch
      const result = yield* search.messages(outboxFilter(args), page)
      if (args.json) return yield* Output.json(result)
      yield* Output.line(
        result.items.length === 0 ? `no dead letters${describe(args)}` : Output.table<(typeof result.items)[number]>([
          { header: "ID", value: (m) => m.id },
          { header: "TOPIC", value: (m) => m.topic },
          { header: "ATTEMPTS", value: (m) => m.attempts },
          { header: "DEAD AT", value: (m) => (m.deadAt ?? "").slice(0, 19).replace("T", " ") },
          { header: "LAST ERROR", value: (m) => Output.clip(m.lastError) }
        ], result.items)
      )
      if (result.next !== undefined) yield* Output.note(`more: --before ${result.next}`)
    },
    withDatabase()
  )
).pipe(Command.withDescription("List dead letters, newest first"))

const show = Command.make(
  "show",
  {
    id: Argument.String("id").pipe(Argument.withMetavar("ID"), Argument.withDescription("The outbox message's id")),
    json
  },
  Effect.fn("effect-durable.dead-letters.show")(
    function*(args) {
      const search = yield* OutboxSearch.OutboxSearch
      const found = yield* search.message(args.id)
      if (Option.isNone(found)) return yield* checkFailed(`no outbox message ${args.id}`)
      const m = found.value
      if (args.json) return yield* Output.json(m)
      // Stored values on one line each, their control characters escaped.
      const field = (name: string, value: string | number | null) =>
        `${`${name}:`.padEnd(16)}${value === null ? "-" : Output.printable(String(value))}`
      yield* Output.line([
        field("id", m.id),
        field("topic", m.topic),
        field("state", m.state),
        field("ordering key", m.orderingKey),
        field(
          "attempts",
          m.state === "dead" && QueueLifecycle.diedPermanently(m.lastError)
            ? `${m.attempts}: a permanent failure, never retried (${m.leaseExpiries} leases ran out)`
            : `${m.attempts} of ${m.maxAttempts} (${m.failures} failed, ${m.leaseExpiries} leases ran out)`
        ),
        field("created", m.createdAt),
        field("available", m.availableAt),
        field("projected", m.projectedAt),
        field("dead", m.deadAt),
        field(
          "lease holder",
          m.claimedBy === null
            ? null
            : `${m.claimedBy} (generation ${m.claimGeneration}${
              m.claimedUntil === null ? "" : `, until ${m.claimedUntil}`
            })`
        ),
        field("last error", m.lastError),
        ...(m.failureHistory.length === 0 ? [] : [
          "failed deliveries (the last 10, oldest first):",
          ...m.failureHistory.map((f) =>
            Output.printable(`  attempt ${f.attempt}  ${f.at}  ${f.worker ?? "-"}  ${f.error}`)
          )
        ]),
        "headers:",
        Output.stringify(m.headers, 2),
        "payload:",
        Output.stringify(m.payload, 2)
      ].join("\n"))
    },
    withDatabase()
  )
).pipe(
  Command.withDescription(
    "One message in full: payload, headers, attempts, lease holder, last error, each failed delivery's error"
  )
)

type Verb = "redrive" | "discard"
const PAST: Readonly<Record<Verb, string>> = { redrive: "redriven", discard: "discarded" }

const act = (verb: Verb) =>
  Command.make(
    verb,
    {
      ...filters,
      all: toggle("all", "Every dead letter matching the filters (this or --id is required)"),
      batchSize: positive("batch-size", 500, 10_000, "Rows per committed batch"),
      yes,
      json
    },
    Effect.fn(`effect-durable.dead-letters.${verb}`)(
      function*(args) {
        if (args.ids.length === 0 && !args.all) {
          return yield* usage(
            `${verb}: name the messages with --id, or pass --all for every dead letter matching the filters`
          )
        }
        let done = 0
        let total = 0
        const report = (n: number) =>
          args.json
            ? Output.json(n < total ? { [PAST[verb]]: n, left: total - n } : { [PAST[verb]]: n })
            : Output.line(
              `${n === 0 ? `nothing to ${verb}` : `${PAST[verb]} ${Output.plural(n, "dead letter")}`}${
                n < total
                  ? `; ${Output.count(total - n)} left as they are (no longer dead${
                    verb === "redrive" ? ", or a dedup key an open message holds" : ""
                  })`
                  : ""
              }`
            )
        const interrupted = Effect.onInterrupt(() =>
          Output.note(
            `${verb}: interrupted after ${Output.count(done)} of ${Output.count(total)}: whole batches are ${
              PAST[verb]
            }, the rest untouched; run it again to continue`
          )
        )

        if (Option.isSome(args.consumer)) {
          yield* inboxOnly(args)
          const inbox = yield* InboxAdmin.InboxAdmin
          const consumer = args.consumer.value
          const run = inbox[verb]
          if (args.ids.length > 0) {
            total = args.ids.length
            yield* confirm(args.yes, `${verb} ${Output.plural(total, "inbox entry", "inbox entries")} of ${consumer}?`)
            return yield* report((yield* run(args.ids)).length)
          }
          total = (yield* inbox.stats).find((s) => s.consumer === consumer)?.dead ?? 0
          if (total === 0) return yield* report(0)
          yield* confirm(
            args.yes,
            `${verb} all ${Output.plural(total, "dead inbox entry", "dead inbox entries")} of ${consumer}?`
          )
          // A page of the newest dead entries at a time; bounded by the count confirmed.
          yield* Effect.gen(function*() {
            while (done < total) {
              const page = yield* inbox.deadLetters({ consumer, limit: Math.min(args.batchSize, total - done, 1000) })
              if (page.items.length === 0) break
              done += (yield* run(page.items.map((d) => d.id))).length
              yield* Output.note(`${verb}: ${Output.count(done)}/${Output.count(total)}`)
            }
          }).pipe(interrupted)
          return yield* report(done)
        }

        const search = yield* OutboxSearch.OutboxSearch
        const filter = outboxFilter(args)
        const matching = yield* search.count(filter)
        total = matching.count
        if (total === 0 || matching.maxId === null) return yield* report(0)
        yield* confirm(args.yes, `${verb} ${Output.plural(total, "dead letter")}${describe(args)}?`)
        // No more than the count confirmed, none newer than the newest counted, none twice.
        yield* Stream.runForEach(
          (yield* OutboxBulk.OutboxBulk)[`${verb}Matching`](filter, {
            upTo: matching.maxId,
            limit: total,
            batchSize: args.batchSize
          }),
          (progress) => {
            done = progress.total
            return progress.ids.length === 0
              ? Effect.void
              : Output.note(`${verb}: ${Output.count(done)}/${Output.count(total)}`)
          }
        ).pipe(interrupted)
        yield* report(done)
      },
      withDatabase()
    )
  ).pipe(Command.withDescription(
    verb === "redrive"
      ? "Make dead letters deliverable again with fresh attempts: --id ... or --all (asks first unless --yes)"
      : "Delete dead letters: --id ... or --all (asks first unless --yes)"
  ))

export const deadLetters = Command.make(
  "dead-letters",
  {},
  () => usage("dead-letters: name a subcommand: list, show, redrive or discard")
).pipe(
  Command.withDescription("List, show, redrive or discard the messages that could not be delivered"),
  Command.withSubcommands([list, show, act("redrive"), act("discard")])
)
