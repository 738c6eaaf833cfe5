/**
 * The idempotent endpoints of an `HttpApi`, read once from their annotations and keyed by
 * `METHOD /route/:pattern` — what `RouteContext.route` names at request time.
 */
import { DurableConfigError } from "@effect-durable/core/Errors"
import * as HttpApi from "effect/http-api/HttpApi"
import type * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { IdempotentEndpoint } from "../Idempotency.js"
import type { Settings } from "./options.js"

/** The ledger names an operation in at most 128 bytes. */
const MAX_OPERATION_BYTES = 128

export const fromApi = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>,
  annotation: Context.Tag<any, IdempotentEndpoint>,
  settings: Settings
): Effect.Effect<ReadonlyMap<string, IdempotentEndpoint>, DurableConfigError> =>
  Effect.suspend(() => {
    const endpoints = new Map<string, IdempotentEndpoint>()
    const refused: Array<DurableConfigError> = []
    HttpApi.reflect(api, {
      onGroup: () => {},
      onEndpoint: ({ endpoint, group, mergedAnnotations }) => {
        const found = Context.getOption(mergedAnnotations, annotation)
        if (Option.isNone(found)) return
        const operation = `${endpoint.method} ${endpoint.path}`
        const field = `${group.identifier}.${endpoint.name}`
        if (!settings.methods.has(endpoint.method)) {
          refused.push(
            new DurableConfigError({
              field,
              rule: `idempotent endpoints use ${[...settings.methods].join(", ")} (the methods option); ${operation} would ignore its key`
            })
          )
        } else if (Buffer.byteLength(operation, "utf8") > MAX_OPERATION_BYTES) {
          refused.push(new DurableConfigError({ field, rule: `method and route pattern in at most ${MAX_OPERATION_BYTES} bytes` }))
        }
        endpoints.set(operation, found.value)
      }
    })
    return refused.length > 0 ? Effect.fail(refused[0]!) : Effect.succeed(endpoints)
  })
