/**
 * How the engine turns what `effect/workflow` hands it into JSON for its tables, and back.
 *
 * The contract is asymmetric (see `WorkflowEngine.Encoded`): a workflow's payload and result
 * cross it as decoded values, so the engine encodes them with the workflow's own schemas; an
 * activity's result and a deferred's exit cross it already encoded, so the engine only has to
 * write their `Exit` (and its `Cause`) as JSON and revive real `Exit` objects from it.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import * as Workflow from "effect/workflow/Workflow"

/** Encoded values may be `undefined` (a void success); JSON has no such thing. */
const AnyValue = Schema.Union([Schema.Any, Schema.Void])

const workflowResults = new WeakMap<Workflow.Any, Schema.Codec<Workflow.Result<unknown, unknown>, unknown>>()

/** A workflow's `Result` as JSON, with its own success and error schemas. */
const workflowResult = (workflow: Workflow.Any) => {
  let codec = workflowResults.get(workflow)
  if (codec === undefined) {
    codec = Schema.toCodecJson(
      Workflow.Result({ success: workflow.successSchema, error: workflow.errorSchema })
    ) as unknown as Schema.Codec<Workflow.Result<unknown, unknown>, unknown>
    workflowResults.set(workflow, codec)
  }
  return codec
}

/** The result of a run, to store. */
export const encodeWorkflowResult = (
  workflow: Workflow.Any,
  result: Workflow.Result<unknown, unknown>
): Effect.Effect<unknown> =>
  Effect.orDie(Schema.encodeEffect(workflowResult(workflow))(result)) as Effect.Effect<unknown>

/** A stored result, as `poll` and `execute` return it. */
export const decodeWorkflowResult = (
  workflow: Workflow.Any,
  json: unknown
): Effect.Effect<Workflow.Result<unknown, unknown>> =>
  Effect.orDie(Schema.decodeUnknownEffect(workflowResult(workflow))(json)) as Effect.Effect<
    Workflow.Result<unknown, unknown>
  >

const payloadCodecs = new WeakMap<Workflow.Any, Schema.Codec<object, unknown>>()

const payloadCodec = (workflow: Workflow.Any) => {
  let codec = payloadCodecs.get(workflow)
  if (codec === undefined) {
    codec = Schema.toCodecJson(workflow.payloadSchema) as unknown as Schema.Codec<object, unknown>
    payloadCodecs.set(workflow, codec)
  }
  return codec
}

/** A workflow's payload schema as JSON Schema text, for messages; `<unavailable>` when it has none. */
export const payloadShape = (workflow: Workflow.Any): string => {
  try {
    const { definitions, schema } = Schema.toJsonSchemaDocument(workflow.payloadSchema)
    return JSON.stringify(Object.keys(definitions).length === 0 ? schema : { ...schema, $defs: definitions })
  } catch {
    return "<unavailable>"
  }
}

/** The payload an execution was started with, as it is stored (and fingerprinted). */
export const encodePayload = (workflow: Workflow.Any, payload: object): Effect.Effect<unknown> =>
  Effect.orDie(Schema.encodeEffect(payloadCodec(workflow))(payload)) as Effect.Effect<unknown>

/** The stored payload, for a run. */
export const decodePayload = (workflow: Workflow.Any, json: unknown): Effect.Effect<object> =>
  Effect.orDie(Schema.decodeUnknownEffect(payloadCodec(workflow))(json)) as Effect.Effect<object>

/**
 * An encoded exit (an activity's, a deferred's) as JSON. Its defects are written as JSON by
 * `Schema.Defect` and read back as that JSON, not revived into `Error`s: the caller
 * (`makeUnsafe`) decodes what the engine hands back with the activity's or the deferred's own
 * schema, whose defect codec takes the JSON form.
 */
const ExitWriter = Schema.toCodecJson(Schema.Exit(AnyValue, AnyValue, Schema.Defect()))
const ExitReader = Schema.toCodecJson(Schema.Exit(AnyValue, AnyValue, Schema.Any))

const nullForUndefined = Exit.map((value: unknown) => value ?? null)

export const encodeExit = (exit: Exit.Exit<unknown, unknown>): Effect.Effect<unknown> =>
  Effect.orDie(Schema.encodeEffect(ExitWriter)(nullForUndefined(exit)))

export const decodeExit = (json: unknown) =>
  Effect.orDie(Schema.decodeUnknownEffect(ExitReader)(json)) as Effect.Effect<Exit.Exit<unknown, unknown>>

/** An activity's recorded result: only a `Complete` is recorded (a suspension is not final). */
export const encodeActivityResult = (result: Workflow.Complete<unknown, unknown>): Effect.Effect<unknown> =>
  Effect.map(encodeExit(result.exit), (exit) => ({ _tag: "Complete", exit }))

export const decodeActivityResult = (json: unknown): Effect.Effect<Workflow.Result<unknown, unknown>> =>
  Effect.map(decodeExit((json as { readonly exit: unknown }).exit), (exit) => new Workflow.Complete({ exit }))
