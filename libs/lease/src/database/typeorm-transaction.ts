/**
 * The one place the library sets TypeORM's transaction state by hand. A fenced transaction opens with its own message
 * (`BEGIN; <the lock>`, one round trip instead of TypeORM's `START TRANSACTION` and then the lock) and may close with
 * one (`<the release>; COMMIT`), sent on the QueryRunner's connection; TypeORM must still know a transaction is open,
 * or the work's `manager.save()` would open and commit one of its own, and a nested `manager.transaction()` would
 * send BEGIN instead of a SAVEPOINT.
 *
 * `PostgresQueryRunner` (TypeORM 1.x) keeps that state in `isTransactionActive` and `transactionDepth`, exactly as
 * `startTransaction()` / `commitTransaction()` leave them at the outer level (depth 1 open, 0 closed). Pinned by
 * test/lease/fenced-round-trips.e2e-spec.ts (a save sends no BEGIN/COMMIT of its own, a nested part is
 * `SAVEPOINT typeorm_1`): if TypeORM changes how it keeps that state, that test fails.
 *
 * Not broadcast to the DataSource's subscribers: `beforeTransactionStart`/`afterTransactionStart` (and the commit's
 * pair when the release travels with COMMIT), which TypeORM sends only from its own transaction methods.
 */
import type { QueryRunner } from 'typeorm';

/** The transaction state of TypeORM's query runners (public and protected fields of `BaseQueryRunner`). */
interface TransactionState {
  isTransactionActive: boolean;
  transactionDepth: number;
}

/** Checks that `runner` keeps its state where this file expects it, before any is set. */
function stateOf(runner: QueryRunner): TransactionState {
  const state = runner as unknown as TransactionState;
  if (typeof state.isTransactionActive !== 'boolean' || typeof state.transactionDepth !== 'number') {
    throw new Error('nest-pg-lease: this TypeORM QueryRunner keeps no transaction state the library knows');
  }
  return state;
}

/** Tells `runner` that the transaction just opened on its connection (by a BEGIN sent past it) is open. */
export function adoptOpenedTransaction(runner: QueryRunner): void {
  const state = stateOf(runner);
  if (state.isTransactionActive || state.transactionDepth !== 0) {
    throw new Error('nest-pg-lease: a fenced transaction opened on a QueryRunner already in a transaction');
  }
  state.isTransactionActive = true;
  state.transactionDepth = 1;
}

/** Tells `runner` that its transaction was committed by a COMMIT sent past it. */
export function adoptCommittedTransaction(runner: QueryRunner): void {
  const state = stateOf(runner);
  state.isTransactionActive = false;
  state.transactionDepth = 0;
}
