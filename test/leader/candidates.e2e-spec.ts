/**
 * One set of leader candidates per application (issue 39, "one way down"): the LeaseService's, which `elect()`,
 * `@LeaderElection` and `@Sticky` share, so that the service's `close()` stops the sticky owners too — with the real
 * module and with the testing kit alike.
 */
import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { LeaseService, LeaseShutdownError, Sticky } from 'nest-pg-lease';
import { LeaseTestingModule } from 'nest-pg-lease/testing';

@Injectable()
class Digest {
  runs = 0;

  @Sticky('digest')
  async run(): Promise<number> {
    return ++this.runs;
  }
}

describe('leader candidates, one set per application', () => {
  test("the testing kit: LeaseService.close() stops the @Sticky owners, and a later call hears it's shut down", async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [LeaseTestingModule.forRoot()],
      providers: [Digest],
    }).compile();
    const app = moduleRef.createNestApplication();
    await app.init();
    try {
      const digest = app.get(Digest);
      await expect(digest.run()).resolves.toBe(1);
      await app.get(LeaseService).close();
      await expect(digest.run()).rejects.toBeInstanceOf(LeaseShutdownError);
      expect(digest.runs).toBe(1);
    } finally {
      await app.close();
    }
  });
});
