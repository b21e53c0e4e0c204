// A TypeDoc plugin (typedoc.json): names the API reference's modules by the import path a user writes
// (`nest-pg-lease/testing`) rather than by the entry file (`testing`).
import { Converter, ReflectionKind } from 'typedoc';

const NAMES = {
  index: 'nest-pg-lease',
  testing: 'nest-pg-lease/testing',
  'integrations/prometheus': 'nest-pg-lease/prometheus',
  'integrations/terminus': 'nest-pg-lease/terminus',
};

/** @param {import('typedoc').Application} app */
export function load(app) {
  app.converter.on(Converter.EVENT_RESOLVE_BEGIN, (context) => {
    for (const module of context.project.getReflectionsByKind(ReflectionKind.Module)) {
      module.name = NAMES[module.name] ?? module.name;
    }
  });
}
