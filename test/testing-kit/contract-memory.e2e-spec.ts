/** The lease contract (contract.ts) on the in-memory service of `nest-pg-lease/testing`: no PostgreSQL. */
import type { LeaseService } from 'nest-pg-lease';
import { createTestingLeaseService, LeaseTestingController } from 'nest-pg-lease/testing';
import { type ContractSubject, leaseContract } from './contract.js';

describe('the lease contract, in memory', () => {
  let service: LeaseService;
  let subject: ContractSubject;

  beforeAll(() => {
    service = createTestingLeaseService({ fencedTransaction: (work) => work({} as never) });
    const controls = LeaseTestingController.of(service);
    subject = {
      service,
      takeOver: async (key) => controls.takeOver(key),
      expire: async (key) => controls.expire(key),
    };
  });

  afterAll(() => service.close());

  leaseContract(() => subject);
});
