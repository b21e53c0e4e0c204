/** The memory backend's operator rows (see memory-backend.ts): drains in a list; no force-release, audit or journal. */
import { LeaseConfigError } from '../../errors/lease.errors.js';
import { messages } from '../../errors/lease.messages.js';
import type { DrainEntry } from '../../interfaces/lease-operator.interface.js';
import type { OperatorBackend } from '../backend.js';

/** The operator backend over `drains` (the backend's list, read by its drain checks). */
export function memoryOperator(drains: DrainEntry[]): OperatorBackend {
  return {
    drains: () => Promise.resolve([...drains]),
    drain: (kind, subject, actor, reason) => {
      const at = new Date();
      drains.push({ kind, subject, actor, reason, at });
      return Promise.resolve(at);
    },
    undrain: (kind, subject) => {
      const at = drains.findIndex((entry) => entry.kind === kind && entry.subject === subject);
      if (at >= 0) drains.splice(at, 1);
      return Promise.resolve(at >= 0);
    },
    forceRelease: () => Promise.reject(new LeaseConfigError(messages.memoryForceRelease())),
    audit: () => Promise.resolve([]),
    history: () => Promise.resolve([]),
    writeJournal: () => Promise.resolve(),
    trimJournal: () => Promise.resolve(0),
    missingTable: () => false,
  };
}
