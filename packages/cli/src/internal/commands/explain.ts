/**
 * `effect-durable explain [--topic T]... [--consumer C] [--limit N] [--analyze] [--json]`: the
 * query plan of a claim with these options, as the claim function runs it (generic plan, its
 * settings), without claiming anything; `--analyze` runs it in a transaction rolled back and
 * shows the rows each step returned. Needs a session of its own: behind a transaction pooler,
 * connect direct.
 */
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { json, positive, toggle } from "../arguments.js"
import { withDatabase } from "../connection.js"
import { usage } from "../errors.js"
import * as Output from "../output.js"

interface PlanNode {
  readonly "Node Type"?: string
  readonly "Relation Name"?: string
  readonly "Index Name"?: string
  readonly "Parent Relationship"?: string
  readonly "Subplan Name"?: string
  readonly "Actual Rows"?: number
  readonly "Actual Loops"?: number
  readonly "Rows Removed by Filter"?: number
  readonly Plans?: ReadonlyArray<PlanNode>
}

/** The plan as an indented tree: `Limit`, `-> LockRows`, `-> Index Scan using outbox_open_due_idx on outbox`. */
export const renderPlan = (plan: unknown): string => {
  const root = (Array.isArray(plan) ? plan[0] : plan) as { readonly Plan?: PlanNode } | undefined
  const lines: Array<string> = []
  const walk = (node: PlanNode, depth: number) => {
    const using = node["Index Name"] === undefined ? "" : ` using ${node["Index Name"]}`
    const on = node["Relation Name"] === undefined ? "" : ` on ${node["Relation Name"]}`
    const sub = node["Subplan Name"] === undefined ? "" : ` (${node["Subplan Name"]})`
    // Analyzed: the rows it returned per loop, the loops, the rows its filter read and dropped.
    const loops = node["Actual Loops"] ?? 1
    const removed = node["Rows Removed by Filter"] ? `, ${node["Rows Removed by Filter"]} filtered out` : ""
    const actual = node["Actual Rows"] === undefined
      ? ""
      : loops === 0
      ? " [never run]"
      : ` [rows ${node["Actual Rows"]}${loops === 1 ? "" : ` x ${loops} loops`}${removed}]`
    lines.push(
      `${"    ".repeat(depth)}${depth === 0 ? "" : "-> "}${node["Node Type"] ?? "?"}${using}${on}${sub}${actual}`
    )
    for (const child of node.Plans ?? []) walk(child, depth + 1)
  }
  if (root?.Plan !== undefined) walk(root.Plan, 0)
  return lines.join("\n")
}

export const explain = Command.make(
  "explain",
  {
    topic: Flag.String("topic").pipe(
      Flag.withMetavar("TOPIC"),
      Flag.atLeast(0),
      Flag.withDescription("A topic the claim takes (repeatable; default all)")
    ),
    consumer: Flag.String("consumer").pipe(
      Flag.withMetavar("CONSUMER"),
      Flag.optional,
      Flag.withDescription("Explain the stored inbox's claim for this consumer")
    ),
    limit: positive("limit", 500, 1000, "Rows the explained claim takes"),
    analyze: toggle(
      "analyze",
      "Run the claim in a transaction rolled back and show the rows each step returned and filtered out"
    ),
    json
  },
  Effect.fn("effect-durable.explain")(
    function*(args) {
      const claim = { worker: "effect-durable-explain", limit: args.limit, lease: "30 seconds" as const }
      let plan: unknown
      const consumer = args.consumer
      if (Option.isSome(consumer)) {
        if (args.topic.length > 0) {
          return yield* usage("explain: --topic is the outbox's, --consumer the inbox's; pass one")
        }
        plan = yield* Effect.flatMap(
          InboxAdmin.InboxAdmin,
          (admin) => admin.explainClaim({ ...claim, consumer: consumer.value }, { analyze: args.analyze })
        )
      } else {
        plan = yield* Effect.flatMap(
          OutboxAdmin.OutboxAdmin,
          (admin) =>
            admin.explainClaim({ ...claim, ...(args.topic.length > 0 ? { topics: args.topic } : {}) }, {
              analyze: args.analyze
            })
        )
      }
      yield* args.json ? Output.json(plan) : Output.line(renderPlan(plan))
    },
    withDatabase({ poolSize: 1 })
  )
).pipe(Command.withDescription("Show the query plan of a claim (nothing is claimed)"))
