// Public API of the image builder (see docs/images.md).
export { writePipLock } from './pip-lock.ts';
export {
  loadRecipe,
  recipeHash,
  listRecipes,
  validateRecipe,
  resolveRecipe,
  canonicalJson,
  BUILDER_VERSION,
  DEFAULT_RECIPES_DIR,
  REPO_ROOT,
  type Recipe,
  type RecipeBase,
  type RecipeUser,
  type RecipeFile,
  type RecipeOptions,
  type ResolvedRecipe,
} from './recipe.ts';
export { buildImage, type BuildOptions } from './build.ts';
export { debianMirrors } from './apt.ts';
export {
  findImage,
  listImages,
  removeImage,
  imagesDirOf,
  DEFAULT_IMAGES_DIR,
  type BuiltImage,
  type ListedImage,
  type ImageManifest,
  type ImageDirOptions,
} from './store.ts';
export { renderProgressToStderr, type BuildProgress, type ProgressCallback } from './progress.ts';
export { ImageError, RecipeError, ImageBuildError, type ImageErrorCode } from './errors.ts';
export { acquireLock, processStartTime, type LockHandle, type LockOptions } from './lock.ts';
