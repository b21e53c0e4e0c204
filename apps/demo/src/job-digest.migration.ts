import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The scheduled digest's table. */
export class CreateJobDigest1764547200000 implements MigrationInterface {
  readonly name = 'CreateJobDigest1764547200000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE job_digest (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      fencing_token bigint NOT NULL UNIQUE,
      instance text NOT NULL,
      reports int NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE job_digest');
  }
}
