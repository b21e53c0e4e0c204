import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

/**
 * One run of the scheduled digest: how many reports were saved since the previous digest. Written under the digest's
 * lease (fenced), so its fencing token says which acquisition wrote it; one row per tick across all instances.
 */
@Entity({ name: 'job_digest' })
export class JobDigest {
  @PrimaryGeneratedColumn('identity', { type: 'bigint', generatedIdentity: 'ALWAYS' })
  id!: string;

  /** bigint: TypeORM reads it as a string, which keeps all 64 bits. */
  @Column({ name: 'fencing_token', type: 'bigint' })
  fencingToken!: string;

  /** Which demo instance ran this tick. */
  @Column({ type: 'text' })
  instance!: string;

  /** Reports saved since the previous digest. */
  @Column({ type: 'int' })
  reports!: number;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;
}
