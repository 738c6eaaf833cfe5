// npm run lint: the house style checked by tools, as Effect's own repository does it —
// @effect/eslint-plugin's dprint rule formats (npm run lint -- --fix rewrites), typescript-eslint
// checks what the compiler does not (floating promises are the compiler's: strict mode).
import * as effectEslint from "@effect/eslint-plugin"
import eslint from "@eslint/js"
import tseslint from "typescript-eslint"

export default tseslint.config(
  {
    ignores: [
      "**/dist/**",
      "**/build/**",
      "**/node_modules/**",
      "**/.node24/**",
      "**/.effect-durable/**",
      "bench/results/**",
      "**/*.js"
    ]
  },
  eslint.configs.recommended,
  tseslint.configs.recommended,
  ...effectEslint.configs.dprint,
  {
    files: ["**/*.ts", "**/*.mjs"],
    rules: {
      // The compiler's noUnusedLocals/noUnusedParameters already hold this; `_name` opts out.
      "@typescript-eslint/no-unused-vars": ["error", {
        argsIgnorePattern: "^_",
        varsIgnorePattern: "^_",
        ignoreRestSiblings: true
      }],
      // Decoded rows and driver values are narrowed by Schema; `any` marks the few casts at the edges.
      "@typescript-eslint/no-explicit-any": "off",
      // Service shapes are interfaces merged with their class (Context.Service).
      "@typescript-eslint/no-empty-object-type": "off",
      "@typescript-eslint/no-namespace": "off",
      "no-control-regex": "off",
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }]
    }
  },
  // House rule: a source file holds one concept, and a file past 400 lines has always held
  // more than one (split it by role: see ../docs/design.md). Blank lines and comments count,
  // as `wc -l` counts them. Excepted, each for its reason:
  // - tests (a suite reads best as one file per guarantee family) and examples: not under src/;
  // - migrations: a released migration is frozen history, never edited to fit a rule.
  {
    files: ["packages/*/src/**/*.ts"],
    ignores: ["packages/pg/src/internal/migrations/**"],
    rules: {
      "max-lines": ["error", { max: 400, skipBlankLines: false, skipComments: false }]
    }
  },
  // House rule: a released migration is history, not a library. Only the migration runner
  // (`Migrations.ts`) reads the record of migrations; runtime code that needs the same SQL
  // takes it from its live module (`internal/flow/`, ...), and a migration takes nothing from
  // runtime code (its text must not change after release).
  {
    files: ["packages/*/src/**/*.ts"],
    ignores: ["packages/pg/src/Migrations.ts", "packages/pg/src/internal/migrations/**"],
    rules: {
      "no-restricted-imports": ["error", {
        patterns: [{
          regex: "(^|/)internal/migrations/|^\\.\\.?/(\\.\\./)*migrations/",
          message:
            "Only the migration runner (packages/pg/src/Migrations.ts) imports migrations: take live SQL from its live module."
        }]
      }]
    }
  },
  // The queues' tables are the pg package's: code above it (the workflow engine, the
  // projector, the publishers, the HTTP middleware) goes through its API (Outbox, OutboxWorker,
  // InboxWorker...), so a change of those tables is a change of one package.
  {
    files: [
      "packages/workflow/src/**/*.ts",
      "packages/workflow-http/src/**/*.ts",
      "packages/projector/src/**/*.ts",
      "packages/http/src/**/*.ts",
      "packages/nats/src/**/*.ts",
      "packages/webhook/src/**/*.ts"
    ],
    rules: {
      "no-restricted-syntax": ["error", {
        selector: "CallExpression[callee.property.name='table'] > Literal[value=/^(outbox|inbox)/]",
        message: "The queues' tables are the pg package's: use its API (Outbox, OutboxWorker, InboxWorker, the admins)."
      }]
    }
  },
  {
    files: ["**/*.mjs"],
    languageOptions: {
      globals: {
        console: "readonly",
        process: "readonly",
        URL: "readonly",
        fetch: "readonly",
        setTimeout: "readonly",
        clearTimeout: "readonly",
        Buffer: "readonly"
      }
    }
  }
)
