// The page's /metrics over HTTP: under the page's credentials; OpenMetrics to a scraper that asks
// for it, Prometheus's text format otherwise (parsed by an npm parser of that format); the values
// the database holds at the scrape and this process's projector counters; and the Grafana
// dashboard in docs/grafana names only metrics the endpoint serves.
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as Projector from "@effect-durable/projector/Projector"
import * as Publisher from "@effect-durable/projector/Publisher"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Redacted from "effect/Redacted"
import * as fc from "fast-check"
import { readFileSync } from "node:fs"
import { createServer } from "node:http"
import { join } from "node:path"
import parsePrometheus from "parse-prometheus-text-format"
import * as AdminPage from "../src/AdminPage.js"
import { format, fromSnapshots, negotiate } from "../src/internal/page/openMetrics.js"
import { enqueue, freshTopic, PACKAGE, portOf, Substrate } from "./support.js"

const TOKEN = "metrics-token-0123456789"
// A page per test: a page keeps what it read of the database for 15 s.
const page = (mount: `/${string}`) => AdminPage.layer({ mount, auth: { bearer: Redacted.make(TOKEN) }, readOnly: true })
const Server = HttpRouter.serve(Layer.mergeAll(page("/ops"), page("/auth"), page("/dash"))).pipe(
  Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: 0, host: "127.0.0.1" }))
)
const Live = Server.pipe(Layer.provideMerge(Substrate))

const scrape = (headers: Record<string, string> = {}, mount = "/ops") =>
  Effect.flatMap(HttpServer.HttpServer, (server) =>
    Effect.promise(async () => {
      const response = await fetch(`http://127.0.0.1:${portOf(server)}${mount}/metrics`, {
        headers: { authorization: `Bearer ${TOKEN}`, ...headers }
      })
      return { status: response.status, type: response.headers.get("content-type"), body: await response.text() }
    }))

interface Parsed {
  readonly name: string
  readonly type: string
  readonly metrics: ReadonlyArray<{ readonly labels?: Record<string, string>; readonly value?: string }>
}

const valueOf = (families: ReadonlyArray<Parsed>, name: string, labels: Record<string, string>) =>
  families.find((f) => f.name === name)?.metrics.find((m) =>
    Object.entries(labels).every(([key, value]) => m.labels?.[key] === value)
  )?.value

/** Every metric name a PromQL expression names (the substrate's own). */
const namesIn = (expr: string) => [...expr.matchAll(/\beffect_durable_[a-z0-9_]+/g)].map((m) => m[0])

describe("the page's /metrics", () => {
  it.layer(Live, { timeout: "120 seconds" })((it) => {
    it.effect("asks for the page's credentials, read-only pages included", () =>
      Effect.gen(function*() {
        expect((yield* scrape({ authorization: "" }, "/auth")).status).toBe(401)
        expect((yield* scrape({ authorization: "Bearer wrong-token-0123456789" }, "/auth")).status).toBe(401)
        expect((yield* scrape({}, "/auth")).status).toBe(200)
      }))

    it.effect("serves what the database holds, and this process's projector counters, in both formats", () =>
      Effect.gen(function*() {
        const topic = freshTopic("metrics")
        yield* enqueue(topic, 3)
        const delivered = freshTopic("metrics.delivered")
        yield* enqueue(delivered, 2)
        yield* Projector.drain({ topics: [delivered] }).pipe(
          Effect.provide(Publisher.layerHandler(() => Effect.void))
        )
        yield* Effect.flatMap(OutboxAdmin.OutboxAdmin, (admin) => admin.pause(topic))

        const prometheus = yield* scrape()
        expect(prometheus.type).toBe("text/plain; version=0.0.4; charset=utf-8")
        const families = parsePrometheus(prometheus.body) as ReadonlyArray<Parsed>
        expect(valueOf(families, "effect_durable_outbox_messages", { topic, state: "ready" })).toBe("3")
        expect(valueOf(families, "effect_durable_outbox_messages", { topic, state: "dead" })).toBe("0")
        expect(valueOf(families, "effect_durable_outbox_topic_paused", { topic })).toBe("1")
        expect(Number(valueOf(families, "effect_durable_outbox_oldest_ready_seconds", { topic })))
          .toBeGreaterThanOrEqual(0)
        const counter = families.find((f) => f.name === "effect_durable_projector_delivered_total")
        expect(counter?.type).toBe("COUNTER")
        expect(Number(valueOf(families, "effect_durable_projector_delivered_total", { topic: delivered }))).toBe(2)
        expect(families.find((f) => f.name === "effect_durable_projector_lag_seconds")?.type).toBe("HISTOGRAM")

        const open = yield* scrape({ accept: "application/openmetrics-text; version=1.0.0,text/plain;q=0.5" })
        expect(open.type).toBe("application/openmetrics-text; version=1.0.0; charset=utf-8")
        const lines = open.body.trimEnd().split("\n")
        expect(lines[lines.length - 1]).toBe("# EOF")
        // A counter's family without `_total`; its sample with it.
        expect(lines).toContain("# TYPE effect_durable_projector_delivered counter")
        expect(lines).toContainEqual(
          expect.stringMatching(new RegExp(`^effect_durable_projector_delivered_total\\{topic="${delivered}"\\} 2$`))
        )
        // Every sample belongs to the family declared last, and every family is declared once.
        const declared: Array<string> = []
        for (const line of lines.slice(0, -1)) {
          const type = /^# TYPE (\S+) /.exec(line)
          if (type !== null) declared.push(type[1]!)
          else if (!line.startsWith("#")) {
            const sample = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)![0]
            const family = declared[declared.length - 1]!
            expect([family, `${family}_total`, `${family}_bucket`, `${family}_count`, `${family}_sum`]).toContain(
              sample
            )
          }
        }
        expect(new Set(declared).size).toBe(declared.length)
      }))

    it.effect("the Grafana dashboard's queries name only metrics the endpoint serves", () =>
      Effect.gen(function*() {
        const dashboard = JSON.parse(
          readFileSync(join(PACKAGE, "..", "..", "docs", "grafana", "effect-durable.json"), "utf8")
        ) as {
          panels: ReadonlyArray<{ title: string; targets: ReadonlyArray<{ expr: string }> }>
        }
        // Served: every sample's name, and the names a declared family's samples take (one
        // declared with no sample yet: no workflow, no feed consumer, no slot in this database).
        const body = (yield* scrape({}, "/dash")).body
        const served = new Set(
          body.split("\n").flatMap((line) => {
            const declared = /^# TYPE (\S+) (\S+)$/.exec(line)
            if (declared !== null) {
              const [, name, type] = declared
              return type === "histogram" ? [`${name}_bucket`, `${name}_count`, `${name}_sum`] : [name!]
            }
            return line === "" || line.startsWith("#") ? [] : [/^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)![0]]
          })
        )
        const missing = dashboard.panels.flatMap((panel) =>
          panel.targets.flatMap((target) =>
            namesIn(target.expr).filter((name) => !served.has(name)).map((name) => `${panel.title}: ${name}`)
          )
        )
        expect(dashboard.panels.length).toBeGreaterThan(10)
        expect(missing).toEqual([])
      }))
  })

  // (An empty label value is no label, in both formats.)
  it("label values of any text are escaped: the Prometheus parser reads each back", () =>
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 40 }), fc.string({ maxLength: 40 }), (topic, help) => {
        const text = format([{
          name: "effect_durable_x",
          type: "gauge",
          help,
          samples: [{ labels: { topic }, value: 1 }]
        }], "prometheus")
        const [family] = parsePrometheus(text) as ReadonlyArray<Parsed>
        expect(family!.metrics[0]!.labels!.topic).toBe(topic)
      })
    ))

  it.effect("an Effect histogram's buckets are cumulative and end at +Inf with the count, then the count and the sum", () =>
    Effect.gen(function*() {
      const histogram = Metric.histogram("h_seconds", {
        description: "a histogram",
        boundaries: Metric.boundariesFromIterable([0.1, 1])
      })
      for (const value of [0.05, 0.5, 0.7, 2]) yield* Metric.update(histogram, value)
      const snapshots = (yield* Metric.snapshot).filter((snapshot) => snapshot.id === "h_seconds")
      expect(format(fromSnapshots(snapshots), "openmetrics")).toBe([
        "# HELP h_seconds a histogram",
        "# TYPE h_seconds histogram",
        "h_seconds_bucket{le=\"0.1\"} 1",
        "h_seconds_bucket{le=\"1\"} 3",
        "h_seconds_bucket{le=\"+Inf\"} 4",
        "h_seconds_count 4",
        "h_seconds_sum 3.25",
        "# EOF",
        ""
      ].join("\n"))
    }))

  it("attributes become labels the format allows: sanitised, reserved names renamed, the first of a clash kept", () => {
    const text = format(
      fromSnapshots([{
        id: "c_total",
        type: "Counter",
        description: "c",
        attributes: { "x.y": "1", x_y: "2", le: "user", __name__: "n" },
        state: { count: 1, incremental: true }
      }] as never),
      "prometheus"
    )
    expect(text).toContain("c_total{x_y=\"1\",exported_le=\"user\",exported_name__=\"n\"} 1")
  })

  it("a family whose name another family of another type took is left out, in both formats", () => {
    const families = [
      { name: "x", type: "counter" as const, help: "a counter", samples: [{ suffix: "_total", labels: {}, value: 1 }] },
      { name: "x_total", type: "gauge" as const, help: "a gauge", samples: [{ labels: {}, value: 2 }] },
      { name: "x", type: "gauge" as const, help: "another", samples: [{ labels: {}, value: 3 }] }
    ]
    for (const as of ["openmetrics", "prometheus"] as const) {
      const types = format(families, as).split("\n").filter((line) => line.startsWith("# TYPE"))
      expect(types, as).toEqual([`# TYPE ${as === "prometheus" ? "x_total" : "x"} counter`])
    }
  })

  it("OpenMetrics only for a scraper that accepts it", () => {
    expect(negotiate("application/openmetrics-text; version=1.0.0,text/plain;q=0.5")).toBe("openmetrics")
    expect(negotiate("text/plain;q=0.5, application/openmetrics-text;q=0")).toBe("prometheus")
    expect(negotiate("text/plain")).toBe("prometheus")
    expect(negotiate(undefined)).toBe("prometheus")
  })
})
