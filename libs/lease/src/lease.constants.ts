/** The longest target key, in bytes of UTF-8 (the lease row's CHECK constraint says the same). */
export const MAX_TARGET_KEY_BYTES = 255;
