/** The lease contract (lease-contract.ts) on the in-memory service of `nest-pg-lease/testing`: no PostgreSQL. */
import type { LeaseService } from 'nest-pg-lease';
import { createTestingLeaseService, LeaseTestingController } from 'nest-pg-lease/testing';
import { type ContractSubject, leaseContract } from './lease-contract.js';
import { leaseTimeoutContract } from './lease-timeout-contract.js';
import { lifecycleContract } from './lifecycle-contract.js';
import { readWriteContract } from './read-write-contract.js';
import { readWriteLifecycleContract } from './read-write-lifecycle-contract.js';
import { multiKeyContract } from './multi-key-contract.js';

describe('the lease contract, in memory', () => {
  let service: LeaseService;
  let subject: ContractSubject;

  beforeAll(() => {
    const make = (options = {}) =>
      createTestingLeaseService({ fencedTransaction: (work) => work({} as never), ...options });
    service = make();
    const controls = LeaseTestingController.of(service);
    subject = {
      service,
      takeOver: async (key) => controls.takeOver(key),
      expire: async (key) => controls.expire(key),
      open: async (options) => {
        const own = make(options);
        return { service: own, close: () => own.close() };
      },
    };
  });

  afterAll(() => service.close());

  leaseContract(() => subject);
  lifecycleContract(() => subject);
  leaseTimeoutContract(() => subject);
  readWriteContract(() => subject);
  readWriteLifecycleContract(() => subject);
  multiKeyContract(() => subject);
});
