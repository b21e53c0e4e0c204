import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The demo's own table; the lease tables come from the library's `leaseMigrations`. */
export class CreateJobResult1764460800000 implements MigrationInterface {
  readonly name = 'CreateJobResult1764460800000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE job_result (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      user_id int NOT NULL,
      fencing_token bigint NOT NULL,
      score int NOT NULL,
      instance text NOT NULL,
      priority int NOT NULL DEFAULT 0,
      saved_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (user_id, fencing_token)
    )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE job_result');
  }
}
