import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

/**
 * One saved report. Every run that saves appends a row carrying the fencing token of the lease it ran under, so the
 * table itself shows which acquisition wrote what, and in which order (a user's report is the newest row).
 * `(user_id, fencing_token)` is unique: one save per acquisition.
 */
@Entity({ name: 'job_result' })
export class JobResult {
  @PrimaryGeneratedColumn('identity', { type: 'bigint', generatedIdentity: 'ALWAYS' })
  id!: string;

  @Column({ name: 'user_id', type: 'int' })
  userId!: number;

  /** bigint: TypeORM reads it as a string, which keeps all 64 bits. */
  @Column({ name: 'fencing_token', type: 'bigint' })
  fencingToken!: string;

  @Column({ type: 'int' })
  score!: number;

  /** Which demo instance saved it. */
  @Column({ type: 'text' })
  instance!: string;

  /** The priority the lease was requested with (0 = a normal click). */
  @Column({ type: 'int', default: 0 })
  priority!: number;

  @CreateDateColumn({ name: 'saved_at', type: 'timestamptz' })
  savedAt!: Date;
}
