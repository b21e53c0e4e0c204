// `npm run lint`: type-aware typescript-eslint (floating promises and misused promises above all: this code starts
// many deliberate background promises, each marked with `void` and a comment) and Prettier's formatting check.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/dist/**',
      'node_modules/**',
      'coverage/**',
      'artifacts/**',
      '.cache/**',
      'docs/.vitepress/cache/**',
      'docs/api/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      // The docs site's config (docs/.vitepress/config.mts) is in no tsconfig: the default project lints it.
      parserOptions: {
        projectService: { allowDefaultProject: ['docs/.vitepress/config.mts'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // One role per file, and every file short enough to read whole (issue 39): the tests and scripts too.
      'max-lines': ['error', { max: 500 }],
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-unsafe-function-type': 'off',
      // Passing on what a caller's code threw (typed unknown) is not inventing a non-Error rejection.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
    },
  },
  {
    // Tests: async callbacks without await are the norm (a mock returning a Promise, a handler that must be async),
    // and expect(object.method) is how Jest checks a method; neither is a bug there.
    files: ['test/**/*.ts', '**/*.spec.ts', '**/*.e2e-spec.ts', 'apps/**/*.spec.ts'],
    rules: {
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/unbound-method': 'off',
      // @Exclusive key templates read parameter names: a parameter only the template uses is not unused.
      '@typescript-eslint/no-unused-vars': ['error', { args: 'none', varsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
  prettier,
);
