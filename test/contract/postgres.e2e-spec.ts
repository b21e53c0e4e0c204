/**
 * The lease contract (lease-contract.ts) on the real engine and PostgreSQL, the losses made by the testing kit's own
 * helpers (`takeOver`, `expire`), as an application's integration test would.
 */
import { expire, takeOver } from 'nest-pg-lease/testing';
import { useTestDatabase } from '../support/db.js';
import { type ContractSubject, leaseContract } from './lease-contract.js';
import { leaseTimeoutContract } from './lease-timeout-contract.js';
import { lifecycleContract } from './lifecycle-contract.js';
import { readWriteContract } from './read-write-contract.js';
import { readWriteLifecycleContract } from './read-write-lifecycle-contract.js';
import { multiKeyContract } from './multi-key-contract.js';

describe('the lease contract, on PostgreSQL', () => {
  const db = useTestDatabase('contract');
  let subject: ContractSubject;

  beforeAll(async () => {
    const { service, dataSource } = await db.open();
    subject = {
      service,
      takeOver: (key) => takeOver(dataSource, key),
      expire: (key) => expire(dataSource, key),
      open: (options) => db.open(options),
    };
  });

  leaseContract(() => subject);
  lifecycleContract(() => subject);
  leaseTimeoutContract(() => subject);
  readWriteContract(() => subject);
  readWriteLifecycleContract(() => subject);
  multiKeyContract(() => subject);
});
