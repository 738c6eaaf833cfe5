/**
 * The page's writes: redrive and discard by ids (outbox and inbox) or of everything a filter
 * matches, held to the count the operator confirmed (409 when the set moved); retry now and
 * move aside (with the operator's reason) by ids, outbox and inbox; pause and resume of a
 * topic. Each is logged with who did it and from where.
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import { printable } from "@effect-durable/core/Printable"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxBulk from "@effect-durable/pg/OutboxBulk"
import type * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as Schedules from "@effect-durable/pg/Schedules"
import type * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as Effect from "effect/Effect"
import * as LimitInput from "../limitInput.js"
import { recordedBy } from "../operator.js"
import {
  ActionBody,
  body,
  ExecutionBody,
  InboxLimitBody,
  jsonResponse,
  LimitBody,
  MessageActionBody,
  type PageError,
  ScheduleBody,
  TopicBody
} from "./edge.js"
import type * as Jobs from "./jobs.js"
import type { makeQueries } from "./queries.js"
import type { PageOptions, Request } from "./route.js"
import { addressOf } from "./security.js"

export interface ActionContext {
  readonly options: PageOptions
  readonly jobs: Effect.Success<typeof Jobs.make>
  readonly queries: ReturnType<typeof makeQueries>
  readonly filterOf: (params: URLSearchParams) => Effect.Effect<OutboxSearch.MessageFilter, PageError>
  readonly workflows: WorkflowAdmin.WorkflowAdmin
}

/**
 * An operator action, logged with who did it and from where: the line with every stored or
 * sent value escaped (a topic holding a newline cannot write a line of its own), the values
 * as they are in the annotations.
 */
export const audit = (r: Request, action: string, fields: Record<string, unknown>) =>
  Effect.logInfo(
    `effect-durable admin: ${printable(action)} by ${printable(r.who)} from ${printable(addressOf(r.request))}`
  ).pipe(
    Effect.annotateLogs({ who: r.who, address: addressOf(r.request), action, ...fields })
  )

/** The Limits form's fields as its JSON names them, for the rules the command shares. */
const FIELDS: LimitInput.FieldNames = {
  maxInFlight: "maxInFlight",
  groupMaxInFlight: "groupMaxInFlight",
  rate: "rate",
  burst: "burst",
  groupRate: "groupRate",
  groupBurst: "groupBurst",
  options: "options",
  clear: "Clear"
}

/** Who acts, as the library records it: fitted to its 128 bytes, never a reason to refuse the action. */
const byOf = (r: Request) => recordedBy(r.who, " (admin page)")

export const make = ({ filterOf, jobs, options, queries, workflows }: ActionContext) => {
  const byIds = (verb: "redrive" | "discard" | "restore", queue: "outbox" | "inbox") =>
    Effect.fnUntraced(function*(r: Request) {
      const input = yield* body(ActionBody)
      if (!("ids" in input)) {
        if (queue === "inbox") return jsonResponse({ error: "the inbox acts on ids" }, 400)
        if (verb === "restore") return jsonResponse({ error: "restore acts on ids" }, 400)
        // Everything matching the filter, dead ones only, held to what the operator confirmed.
        const filter: OutboxSearch.MessageFilter = {
          ...(yield* filterOf(new URLSearchParams(input.filter))),
          state: "dead"
        }
        const counted = yield* queries.deadCount(filter)
        const upTo = input.upTo ?? counted.maxId
        if (counted.count !== input.expected || counted.maxId !== upTo || upTo === null) {
          return jsonResponse({
            error:
              `the dead messages matching this filter changed since they were counted (${counted.count} now, ${input.expected} confirmed): count them again`,
            count: counted.count,
            maxId: counted.maxId
          }, 409)
        }
        const bulk = yield* OutboxBulk.OutboxBulk
        const stream = bulk[`${verb}Matching`](filter, {
          upTo,
          limit: input.expected,
          batchSize: options.batchSize,
          statementTimeout: options.statementTimeout
        })
        const id = yield* jobs.start(`${verb} of all matching`, r.who, input.expected, stream)
        yield* audit(r, `${verb} of all matching (${input.expected} dead messages)`, {
          filter: input.filter,
          job: id,
          count: input.expected
        })
        return jsonResponse({ job: id, total: input.expected })
      }
      const run: Effect.Effect<
        ReadonlyArray<string>,
        InvalidInput | DatabaseError,
        OutboxAdmin.OutboxAdmin | InboxAdmin.InboxAdmin
      > = queue === "outbox"
        ? Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin[verb](input.ids))
        : Effect.flatMap(InboxAdmin.InboxAdmin, (admin) => admin[verb](input.ids))
      const applied = yield* queries.timed(run)
      yield* audit(r, `${verb} of ${applied.length} ${queue} message(s) ${applied.join(",")}`, {
        queue,
        ids: applied.length
      })
      return jsonResponse({ ids: applied })
    })

  /** Retry now or move aside, by ids: the ids acted on come back (the others were in no state for it). */
  const messageAction = (verb: "retryNow" | "moveAside", queue: "outbox" | "inbox") =>
    Effect.fnUntraced(function*(r: Request) {
      const input = yield* body(MessageActionBody)
      if (verb === "moveAside" && input.reason === undefined) {
        return jsonResponse({ error: "moving a message aside needs a reason" }, 400)
      }
      const reason = input.reason ?? ""
      const by = byOf(r)
      const run: Effect.Effect<
        ReadonlyArray<string>,
        InvalidInput | DatabaseError,
        OutboxAdmin.OutboxAdmin | InboxAdmin.InboxAdmin
      > = queue === "outbox"
        ? Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin[verb](input.ids, { reason, by }))
        : Effect.flatMap(InboxAdmin.InboxAdmin, (admin) => admin[verb](input.ids, { reason, by }))
      const applied = yield* queries.timed(run)
      yield* audit(r, `${verb} of ${applied.length} ${queue} message(s) ${applied.join(",")}`, {
        queue,
        ids: applied.length,
        ...(verb === "moveAside" ? { reason } : {})
      })
      return jsonResponse({ ids: applied })
    })

  const topicAction = (verb: "pause" | "resume") =>
    Effect.fnUntraced(function*(r: Request) {
      const { topic } = yield* body(TopicBody)
      const admin = yield* OutboxAdmin.OutboxAdmin
      const changed = yield* queries.timed(
        verb === "pause" ? admin.pause(topic, { by: recordedBy(r.who) }) : admin.resume(topic)
      )
      yield* audit(r, `${verb} topic ${topic}`, { topic, changed })
      return jsonResponse({ topic, changed })
    })

  /** Interrupt or resume of one workflow execution; `changed` false when it was in no state for it. */
  const workflowAction = (verb: "interrupt" | "resume") =>
    Effect.fnUntraced(function*(r: Request) {
      const { executionId, workflow } = yield* body(ExecutionBody)
      const changed = yield* queries.timed(workflows[verb](workflow, executionId))
      yield* audit(r, `${verb} workflow ${workflow} execution ${executionId}`, { workflow, executionId, changed })
      return jsonResponse({ workflow, executionId, changed })
    })

  /** Pause or resume of a schedule; `changed` false when it was in no state for it. */
  const scheduleAction = (verb: "pause" | "resume") =>
    Effect.fnUntraced(function*(r: Request) {
      const { name } = yield* body(ScheduleBody)
      const schedules = yield* Schedules.Schedules
      const changed = yield* queries.timed(
        verb === "pause" ? schedules.pause(name, { by: recordedBy(r.who) }) : schedules.resume(name)
      )
      yield* audit(r, `${verb} schedule ${name}`, { schedule: name, changed })
      return jsonResponse({ name, changed })
    })

  /**
   * Set a topic's limits (every one given: null is none; by the rules `limits set` reads its
   * flags with) or clear them; the library checks the values.
   */
  const limitAction = (verb: "set" | "clear") =>
    Effect.fnUntraced(function*(r: Request) {
      const input = yield* body(LimitBody)
      const flow = yield* FlowControl.FlowControl
      const { groupMaxInFlight = null, maxInFlight = null } = input
      const changed = verb === "set"
        ? yield* Effect.as(
          queries.timed(flow.setLimit(input.topic, {
            ...(yield* LimitInput.topicLimits({
              maxInFlight,
              groupMaxInFlight,
              rate: input.rate ?? null,
              burst: input.burst ?? null,
              groupRate: input.groupRate ?? null,
              groupBurst: input.groupBurst ?? null
            }, FIELDS)),
            by: byOf(r)
          })),
          true
        )
        : yield* queries.timed(flow.clear(input.topic))
      yield* audit(
        r,
        verb === "set"
          ? `set limits of topic ${input.topic}: max ${maxInFlight ?? "none"}, per group ${
            groupMaxInFlight ?? "none"
          }, rate ${input.rate || "none"}, per-group rate ${input.groupRate || "none"}`
          : `clear limits of topic ${input.topic}`,
        { topic: input.topic, changed }
      )
      return jsonResponse({ topic: input.topic, changed })
    })

  /** Set a stored-inbox consumer's limits (as `limits inbox set` does) or clear them; the library checks the values. */
  const inboxLimitAction = (verb: "set" | "clear") =>
    Effect.fnUntraced(function*(r: Request) {
      const input = yield* body(InboxLimitBody)
      const flow = yield* FlowControl.FlowControl
      const maxInFlight = input.maxInFlight ?? null
      const changed = verb === "set"
        ? yield* Effect.as(
          queries.timed(flow.setInboxLimit(input.consumer, {
            ...(yield* LimitInput.inboxLimits(
              { maxInFlight, rate: input.rate ?? null, burst: input.burst ?? null },
              FIELDS
            )),
            by: byOf(r)
          })),
          true
        )
        : yield* queries.timed(flow.clearInbox(input.consumer))
      yield* audit(
        r,
        verb === "set"
          ? `set limits of inbox consumer ${input.consumer}: max ${maxInFlight ?? "none"}, rate ${input.rate || "none"}`
          : `clear limits of inbox consumer ${input.consumer}`,
        { consumer: input.consumer, changed }
      )
      return jsonResponse({ consumer: input.consumer, changed })
    })

  /** Cancel by ids, with an optional reason: the ids cancelled come back (a delivery under way is stopped). */
  const cancelAction = (queue: "outbox" | "inbox") =>
    Effect.fnUntraced(function*(r: Request) {
      const input = yield* body(MessageActionBody)
      const options = {
        by: byOf(r),
        ...(input.reason === undefined ? {} : { reason: input.reason })
      }
      const run: Effect.Effect<
        { readonly cancelled: ReadonlyArray<string>; readonly interrupted: ReadonlyArray<string> },
        InvalidInput | DatabaseError,
        OutboxAdmin.OutboxAdmin | InboxAdmin.InboxAdmin
      > = queue === "outbox"
        ? Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.cancel(input.ids, options))
        : Effect.flatMap(InboxAdmin.InboxAdmin, (admin) => admin.cancel(input.ids, options))
      const done = yield* queries.timed(run)
      yield* audit(r, `cancel of ${done.cancelled.length} ${queue} message(s) ${done.cancelled.join(",")}`, {
        queue,
        ids: done.cancelled.length,
        interrupted: done.interrupted.length
      })
      return jsonResponse({ ids: done.cancelled, interrupted: done.interrupted })
    })

  return {
    byIds,
    messageAction,
    topicAction,
    workflowAction,
    scheduleAction,
    limitAction,
    inboxLimitAction,
    cancelAction
  }
}

export type Actions = ReturnType<typeof make>
