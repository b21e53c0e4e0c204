import { LeaseConfigError } from '../errors/lease.errors.js';
import { exclusiveMetadata } from './call-input.js';

describe("@Exclusive's sticky option", () => {
  it('accepts a boolean on a fixed key', () => {
    expect(exclusiveMetadata('digest', { onBusy: 'skip', sticky: true }).sticky).toBe(true);
    expect(exclusiveMetadata('report:{id}', { sticky: false }).sticky).toBe(false);
  });

  it('refuses a non-boolean, a key template with placeholders and a key function', () => {
    expect(() => exclusiveMetadata('digest', { sticky: 'yes' as unknown as boolean })).toThrow(LeaseConfigError);
    expect(() => exclusiveMetadata('report:{id}', { sticky: true })).toThrow(/fixed key/);
    expect(() => exclusiveMetadata(() => 'digest', { sticky: true })).toThrow(LeaseConfigError);
  });
});
