/**
 * What a `LeaseBusyError` was refused for, beyond its public fields: the limit of a semaphore whose every slot is held
 * (the client's answer names it, transport/lease-answers.ts). Private: set where the error is made (engine/acquisition-route.ts).
 */
import type { LeaseBusyError } from './lease.errors.js';

export const slotLimitOf = new WeakMap<LeaseBusyError, number>();
