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
