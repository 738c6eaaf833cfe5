import { describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { processAlive } from "../src/internal/embedded.js"

const fixture = fileURLToPath(new URL("./fixtures/hold-server.ts", import.meta.url))

interface Held {
  readonly pid: number
  readonly dataDir: string
}

const startHolder = () => {
  const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", fixture], {
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stderr = ""
  child.stderr.on("data", (chunk) => (stderr += chunk))
  const held = new Promise<Held>((resolve, reject) => {
    let stdout = ""
    child.stdout.on("data", (chunk) => {
      stdout += chunk
      const line = stdout.split("\n")[0]
      if (stdout.includes("\n") && line) resolve(JSON.parse(line))
    })
    child.once("exit", (code) => reject(new Error(`holder exited (${code}) before reporting: ${stderr}`)))
  })
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  return { child, held, exited }
}

const eventually = async (condition: () => boolean, deadlineMs: number): Promise<boolean> => {
  const until = Date.now() + deadlineMs
  while (Date.now() < until) {
    if (condition()) return true
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return condition()
}

describe("the embedded server leaks nothing", () => {
  it.each(["SIGTERM", "SIGINT", "SIGKILL"] as const)(
    "when its owner process gets %s, the server process and its data directory are gone",
    async (signal) => {
      const { child, held, exited } = startHolder()
      const { pid, dataDir } = await held
      expect(processAlive(pid)).toBe(true)
      expect(existsSync(dataDir)).toBe(true)
      child.kill(signal)
      await exited
      expect(await eventually(() => !processAlive(pid), 15_000)).toBe(true)
      expect(await eventually(() => !existsSync(dataDir), 15_000)).toBe(true)
    },
    90_000
  )
})

describe("the embedded server leaves the process alone", () => {
  it("keeps the exit code its owner sets (no exit hooks)", async () => {
    const child = spawn(process.execPath, [
      "--conditions=source",
      "--import",
      "tsx",
      fileURLToPath(new URL("./fixtures/exit-code.ts", import.meta.url))
    ], {
      stdio: ["ignore", "ignore", "pipe"]
    })
    let stderr = ""
    child.stderr.on("data", (chunk) => (stderr += chunk))
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve))
    expect({ code, stderr }).toEqual({ code: 3, stderr: "" })
  }, 60_000)
})
